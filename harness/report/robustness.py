"""The robustness section: per task, accuracy and ECE against each corruption's severity, under training label
noise and with smaller feature budgets (mean ± std over seeds, with the normalised area under each curve), and
the plot of accuracy against severity."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnbench.report import inference
from attnbench.report.load import Results, detail_rows, metric_frame
from attnbench.report.plot import Plot, legend_below, new_figure, save_plot
from attnbench.report.sections import ReportContext, register_report_section
from attnbench.report.stats import metric_direction, summarize
from attnbench.report.table import Table, fmt_summary, slug


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
    data, text_rows = [], []
    measures: dict[str, str] = {}  # each column's registered metric, whose direction ranks it
    per_seed: list[dict] = []  # each cell's value per seed, for the best sets that bold
    for (task, label, group), part in rows.groupby(["task", "label", "group"], sort=True):
        text = {"task": task, "label": label, "perturbation": group}
        summary = {}
        if with_auc:
            for column, metric in (("AUC", _auc_metric(group)), ("overall AUC", "robustness_auc")):
                mine = metrics[(metrics["task"] == task) & (metrics["label"] == label) & (metrics["metric"] == metric)]
                summary[column] = summarize(mine["value"])
                text[column] = fmt_summary(summary[column])
                measures[column] = metric
                per_seed.extend({"task": task, "perturbation": group, "column": column, "label": label,
                                 "seed": r.seed, "value": r.value} for r in mine.itertuples())  # fmt: skip
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
            for column, values in ((f"acc@{key}", at["accuracy"]), (f"ece@{key}", at["ece"])):
                per_seed.extend({"task": task, "perturbation": group, "column": column, "label": label,
                                 "seed": seed, "value": value} for seed, value in zip(at["seed"], values))  # fmt: skip
            text[f"acc@{key}"], text[f"ece@{key}"] = fmt_summary(acc), fmt_summary(ece)
            measures[f"acc@{key}"], measures[f"ece@{key}"] = "accuracy", "ece"
        text_rows.append(text)
    text = pd.DataFrame(text_rows)
    return Table(name, title, pd.DataFrame(data), text, _top_groups(text, pd.DataFrame(per_seed), measures), notes,
                 key_columns=3)  # fmt: skip


def _top_groups(text: pd.DataFrame, per_seed: pd.DataFrame, measures: dict[str, str]) -> pd.DataFrame:
    """Bold per task, perturbation and column: the engine's best set of the labels' per-seed values there
    (`attnbench.report.inference`), where it leaves some label out; a column whose metric has no direction, none."""
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    if per_seed.empty:
        return best
    for (task, group, column), values in per_seed.groupby(["task", "perturbation", "column"], sort=False):
        metric = measures[column]
        if not metric_direction(metric):
            continue
        rows = text.index[(text["task"] == task) & (text["perturbation"] == group)]
        frame = values.dropna(subset=["value"]).assign(task=f"{task} {group} {column}", metric=metric)
        if frame.empty:
            continue
        best.loc[rows, column] = inference.frame_standings(frame, metric).marks(list(text.loc[rows, "label"]))
    return best


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
                    "Bold: the best set per task, perturbation and column (the labels no other label is detectably "
                    "better than, inference engine, Holm over the column's pairs), where it leaves some label out; one "
                    "seed: no bold."
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
                    "over seeds. Bold: the best set per task and column (the labels no other label is detectably better than, "
                    "inference engine), where it leaves some label out."
                ],
                with_auc=False,
            )
        )
    return tables


def plot_robustness(context: ReportContext, out_dir: Path) -> list[Plot]:
    """Per task: accuracy vs severity (or feature budget), one panel per perturbation, ± std band over seeds."""
    results, colors = context.results, context.colors
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


register_report_section(
    "robustness", order=40, tables=robustness_tables, plots=plot_robustness, measurements=("robustness",)
)
