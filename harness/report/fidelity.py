"""The fidelity section: each approximation's output error against exact softmax attention, beside uniform
attention's on the same inputs."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnbench.report.load import Results, detail_rows
from attnbench.report.sections import register_report_section
from attnbench.report.stats import summarize
from attnbench.report.table import Table, best_mask, finite, fmt, fmt_summary, group_keys


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


register_report_section(
    "fidelity", order=60, tables=lambda results: [fidelity_table(results)], measurements=("fidelity",)
)
