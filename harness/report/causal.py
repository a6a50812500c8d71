"""Report sections of the causal setting: recall against state size (`recall`), and the decoding crossover
(`decode`); both plots colour labels and attention names alike (`causal_colors`).

- `recall_table`: MQAR answer accuracy per attention label at each num_kv_pairs (the inference engine's mean,
  interval, rank and best set), with the state bytes per sequence and layer.
- `plot_recall_vs_state`: Zoology's Figure 2 - accuracy against state bytes (log axis), one panel per
  num_kv_pairs, one line per attention family (the registered name) through its labels (widths, features).
- `plot_recall_per_query`: accuracy of the k-th question of a row against k, a panel per num_kv_pairs.
- `decode_crossover_table`, `decode_paired_table` and `plot_decode`: per-token decoding latency and prefill
  throughput against context length; the timing check of each step against softmax's (timed in alternation,
  sign test) per context, and the shortest measured context from which on each label's step is detectably
  faster.
- `lm_positions_table` and `plot_lm_positions`: bits per byte per position bucket and at twice the training
  length; `plot_lm_long_positions`: per position bucket up to the longest eval length (`eval_lengths`).
The bits-per-byte table with intervals and tested rank groups is the generic per-task table of the `lm`
measurement (no section claims it), as are recall's and decode's metrics per task beside the tables here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnbench.decisions.signs import timing_verdicts
from attnbench.metrics import MetricInfo, metric_info
from attnbench.report import inference
from attnbench.report.load import Results, detail_rows
from attnbench.report.plot import Plot, label_colors, legend_below, new_figure, save_plot
from attnbench.report.sections import ReportContext, register_report_section
from attnbench.report.stats import summarize
from attnbench.report.table import DASH, Table, fmt, fmt_summary

SOFTMAX = "softmax"


def recall_points(results: Results) -> pd.DataFrame:
    """One row per ok recall cell on MQAR (those that report num_kv_pairs): label, attention, num_kv_pairs, seed,
    accuracy, state_bytes."""
    cells = results.of("recall")
    cells = cells[cells["metrics"].map(lambda m: (m or {}).get("num_kv_pairs") is not None)]
    rows = [
        {
            "label": c["label"],
            "attention": c["attention"],
            "task": c["task"],
            "seed": c["seed"],
            "num_kv_pairs": c["metrics"].get("num_kv_pairs"),
            "accuracy": c["metrics"].get("accuracy"),
            "state_bytes": c["metrics"].get("state_bytes"),
        }
        for _, c in cells.iterrows()
    ]
    return pd.DataFrame(rows, columns=["label", "attention", "task", "seed", "num_kv_pairs", "accuracy", "state_bytes"])


def recall_tasks(points: pd.DataFrame) -> dict[str, str]:
    """Each recall task (its full key: name, label and differing options) -> its column and panel title, in order of
    num_kv_pairs: 'kv 8' where one task has that count, 'kv 8 · <task>' where several do (other lengths), so
    that no column pools two tasks."""
    pairs = points.groupby("task")["num_kv_pairs"].first()
    shared = pairs.value_counts()
    return {
        task: f"kv {int(p)}" if shared[p] == 1 else f"kv {int(p)} · {task}"
        for task, p in sorted(pairs.items(), key=lambda item: (item[1], str(item[0])))
    }


def recall_table(results: Results) -> Table | None:
    """Accuracy per label (rows) and recall task (columns, by num_kv_pairs), with state bytes per task where they
    differ between tasks (other lengths): the inference engine's interval, rank and best set per task."""
    points = recall_points(results)
    if points.empty:
        return None
    tasks = recall_tasks(points)
    cells = results.of("recall")
    groups = {task: inference.label_standings(cells[cells["task"] == task], "accuracy") for task in tasks}
    per_task_state = points.groupby(["label", "attention"])["state_bytes"].nunique().max() > 1
    data, text = [], []
    for (label, attention), part in points.groupby(["label", "attention"], sort=True):
        rec, row = {"label": label, "attention": attention}, {"label": label, "attention": attention}
        if not per_task_state:
            rec["state bytes"] = float(part["state_bytes"].mean())
            row["state bytes"] = fmt(rec["state bytes"], 0)
        for task, column in tasks.items():
            standing = groups[task].get(label)
            rec |= inference.standing_columns(f"{column} ", standing)
            rec[column] = np.nan if standing is None else standing["mean"]
            row[column] = (
                DASH
                if standing is None
                else inference.interval_text(standing["mean"], standing["low"], standing["high"], standing["values"])
                + f" (rank {inference.rank_text(standing)})"
            )
            if per_task_state:
                mine = part[part["task"] == task]
                state = float(mine["state_bytes"].mean()) if len(mine) else np.nan
                rec[f"state bytes {column}"], row[f"state bytes {column}"] = state, fmt(state, 0)
        data.append(rec)
        text.append(row)
    data, text = pd.DataFrame(data), pd.DataFrame(text)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    for task, column in tasks.items():
        best[column] = groups[task].marks(list(data["label"]))
    notes = [
        "MQAR answer accuracy on the test split per task, by its number of key-value pairs (a task's other options, "
        "such as its length, after the count where two tasks share it). " + inference.STANDINGS_NOTE,
        "State bytes: the decoding state per sequence and layer at the row length (softmax: its KV cache; a feature "
        "map: features x head_dim plus the normaliser).",
    ]
    notes += [n for n in (inference.variance_note(g.table for g in groups.values()),) if n]
    return Table("recall", "Associative recall (MQAR) against state size", data, text, best, notes, key_columns=2)


def causal_colors(results: Results) -> dict[str, tuple[float, ...]]:
    """One colour per label and per attention name (the recall plot draws a line per attention family)."""
    return label_colors([*results.labels(), *results.cells["attention"].dropna()])


def plot_recall_vs_state(context: ReportContext, out_dir: Path) -> list[Plot]:
    """Accuracy against state bytes (log), a panel per num_kv_pairs, a line per attention family."""
    points = recall_points(context.results)
    if points.empty:
        return []
    tasks = recall_tasks(points)
    means = points.groupby(["task", "attention", "label"], as_index=False)[["accuracy", "state_bytes"]].mean()
    colors = causal_colors(context.results)
    family_colors = {name: colors.get(name, None) for name in sorted(means["attention"].unique())}
    fig = new_figure(3.2 * len(tasks), 3.2)
    axes = np.atleast_1d(fig.subplots(1, len(tasks), sharey=True))
    for ax, (task, title) in zip(axes, tasks.items()):
        for family, part in means[means["task"] == task].groupby("attention", sort=True):
            part = part.sort_values("state_bytes")
            ax.plot(part["state_bytes"], part["accuracy"], marker="o", label=family, color=family_colors[family])
        ax.set_xscale("log")
        ax.set_title(_panel_title(title), fontsize="small")
        ax.set_xlabel("state bytes per sequence and layer")
        ax.axhline(0.9, color="grey", linewidth=0.5, linestyle=":")
    axes[0].set_ylabel("MQAR accuracy")
    legend_below(fig, axes)
    return [save_plot(fig, out_dir, "recall_vs_state", "MQAR accuracy against state size (Zoology Figure 2)")]


def _panel_title(column: str) -> str:
    """'8 key-value pairs' for the column 'kv 8', with the task after it where it names one."""
    count, _, task = column.removeprefix("kv ").partition(" · ")
    return f"{count} key-value pairs" + (f"\n{task}" if task else "")


def recall_per_query(results: Results) -> pd.DataFrame:
    """Mean over seeds of each label's accuracy per query (the k-th question of a row): label, attention, task,
    num_kv_pairs, query (1-based), accuracy."""
    rows = [
        {
            "label": c["label"],
            "attention": c["attention"],
            "task": c["task"],
            "num_kv_pairs": c["metrics"].get("num_kv_pairs"),
            "query": k + 1,
            "accuracy": value,
        }
        for _, c in results.of("recall").iterrows()
        for k, value in enumerate((c["details"] or {}).get("accuracy_per_query") or [])
    ]
    frame = pd.DataFrame(rows, columns=["label", "attention", "task", "num_kv_pairs", "query", "accuracy"])
    return frame.groupby(["label", "attention", "task", "num_kv_pairs", "query"], as_index=False)["accuracy"].mean()


def plot_recall_per_query(context: ReportContext, out_dir: Path) -> list[Plot]:
    """Accuracy of the k-th question of a row against k, a panel per num_kv_pairs, a line per label: whether
    a mixer loses the later queries (whose keys lie further back, or more of whose pairs it had to hold)."""
    points = recall_per_query(context.results)
    if points.empty:
        return []
    tasks = recall_tasks(points)
    colors = causal_colors(context.results)
    fig = new_figure(3.2 * len(tasks), 3.2)
    axes = np.atleast_1d(fig.subplots(1, len(tasks), sharey=True))
    for ax, (task, title) in zip(axes, tasks.items()):
        for label, part in points[points["task"] == task].groupby("label", sort=True):
            ax.plot(part["query"], part["accuracy"], marker=".", label=label, color=colors.get(label))
        ax.set_title(_panel_title(title), fontsize="small")
        ax.set_xlabel("query (k-th question of the row)")
    axes[0].set_ylabel("MQAR accuracy (mean over seeds)")
    legend_below(fig, axes)
    return [save_plot(fig, out_dir, "recall_per_query", "MQAR accuracy per query position")]


def _recall_plots(context: ReportContext, out_dir: Path) -> list[Plot]:
    return plot_recall_vs_state(context, out_dir) + plot_recall_per_query(context, out_dir)


def row_keys(points: pd.DataFrame) -> list[str]:
    """The key columns of a causal table's rows: the label, after the task (its full key) where there are several,
    so that no row pools two tasks' cells."""
    return ["task", "label"] if points["task"].nunique() > 1 else ["label"]


def _row(keys: list[str], values: Any) -> dict[str, Any]:
    return dict(zip(keys, values if isinstance(values, tuple) else (values,)))


def lm_positions(results: Results) -> pd.DataFrame:
    """Each ok lm cell's bits per byte per position bucket: task, label, seed, start, stop, bits_per_byte."""
    rows = [
        {"task": c["task"], "label": c["label"], "seed": c["seed"], **bucket}
        for _, c in results.of("lm").iterrows()
        for bucket in (c["details"] or {}).get("position_buckets") or []
    ]
    return pd.DataFrame(rows, columns=["task", "label", "seed", "start", "stop", "bits_per_byte"])


def lm_positions_table(results: Results) -> Table | None:
    """Bits per byte per position bucket (mean ± std over seeds) and at twice the training length, per label (and
    task, where there are several)."""
    points = lm_positions(results)
    if points.empty:
        return None
    buckets = sorted({(int(a), int(b)) for a, b in zip(points["start"], points["stop"])})
    twice = results.of("lm")
    keys = row_keys(points)
    data, text = [], []
    for key, part in points.groupby(keys if len(keys) > 1 else keys[0], sort=True):
        rec, row = _row(keys, key), _row(keys, key)
        for a, b in buckets:
            s = summarize(part.loc[(part["start"] == a) & (part["stop"] == b), "bits_per_byte"])
            rec[f"bpb {a}-{b}"], row[f"{a}-{b}"] = s["mean"], fmt_summary(s)
        mine = (twice["label"] == rec["label"]) & (twice["task"] == part["task"].iloc[0])
        long = summarize(twice.loc[mine, "metrics"].map(lambda m: m.get("bits_per_byte_2x")))
        rec["bpb at 2x length"], row["at 2x length"] = long["mean"], fmt_summary(long)
        data.append(rec)
        text.append(row)
    text = pd.DataFrame(text)
    notes = [
        (
            "Held-out bits per byte of the positions in each range of the block (mean ± std over seeds). Each range holds other bytes of the text (the blocks are cut at fixed offsets), "
            "so read a column across attentions (what more context buys one mechanism over another at that "
            "depth), not a row across ranges, whose differences are mostly the text's. At 2x length: blocks "
            "twice the training length, beyond the positions the model was trained on. Not ranked here; the "
            "per-task table ranks bits per byte (inference engine)."
        )
    ]
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    return Table(
        "lm_positions",
        "Language modelling: bits per byte by position",
        pd.DataFrame(data),
        text,
        best,
        notes,
        key_columns=len(keys),
    )


def plot_lm_positions(context: ReportContext, out_dir: Path) -> list[Plot]:
    """Bits per byte against position in the block (bucket middles), a line per label, mean over seeds."""
    points = lm_positions(context.results)
    if points.empty:
        return []
    several = points["task"].nunique() > 1
    means = (
        points.assign(middle=(points["start"] + points["stop"]) / 2)
        .groupby(["task", "label", "middle"], as_index=False)["bits_per_byte"]
        .mean()
    )
    colors = causal_colors(context.results)
    fig = new_figure(4.8, 3.3)
    ax = fig.subplots()
    for (task, label), part in means.groupby(["task", "label"], sort=True):
        shown = f"{label} · {task}" if several else label
        ax.plot(part["middle"], part["bits_per_byte"], marker="o", label=shown, color=colors.get(label))
    ax.set_xlabel("position in the block (bucket middle)")
    ax.set_ylabel("held-out bits per byte")
    legend_below(fig, [ax])
    return [save_plot(fig, out_dir, "lm_positions", "Bits per byte against position in the block")]


def lm_long_positions(results: Results) -> pd.DataFrame:
    """Each ok lm cell's bits per byte per position bucket of its longest eval length (`details.per_length`): task,
    label, seed, length, train_length (the training block), start, stop, bits_per_byte."""
    rows = []
    for _, c in results.of("lm").iterrows():
        per_length = (c["details"] or {}).get("per_length") or []
        if per_length:
            longest = max(per_length, key=lambda row: row["length"])
            train_length = ((c.get("provenance") or {}).get("data") or {}).get("max_length", np.nan)
            rows += [
                {"task": c["task"], "label": c["label"], "seed": c["seed"], "length": longest["length"],
                 "train_length": train_length, **bucket}
                for bucket in longest["position_buckets"]
            ]  # fmt: skip
    columns = ["task", "label", "seed", "length", "train_length", "start", "stop", "bits_per_byte"]
    return pd.DataFrame(rows, columns=columns)


def plot_lm_long_positions(context: ReportContext, out_dir: Path) -> list[Plot]:
    """Bits per byte against position up to the longest eval length (bucket middles), a panel per task, a line
    per label (mean over seeds), the training length marked: what a model makes of positions it never trained on."""
    points = lm_long_positions(context.results)
    if points.empty:
        return []
    colors = causal_colors(context.results)
    tasks = sorted(points["task"].unique())
    fig = new_figure(4.2 * len(tasks), 3.3)
    axes = np.atleast_1d(fig.subplots(1, len(tasks), sharey=True))
    for ax, task in zip(axes, tasks):
        part = points[points["task"] == task].assign(middle=lambda p: (p["start"] + p["stop"]) / 2)
        means = part.groupby(["label", "middle"], as_index=False)["bits_per_byte"].mean()
        for label, mine in means.groupby("label", sort=True):
            ax.plot(mine["middle"], mine["bits_per_byte"], marker="o", label=label, color=colors.get(label))
        ax.axvline(part["train_length"].max(), color="grey", linewidth=0.6, linestyle=":")
        ax.set_title(f"{task}: blocks of {int(part['length'].max())}", fontsize="small")
        ax.set_xlabel("position in the block (bucket middle)")
    axes[0].set_ylabel("held-out bits per byte")
    legend_below(fig, axes)
    return [save_plot(fig, out_dir, "lm_long_positions", "Bits per byte against position past the training length")]


def _lm_plots(context: ReportContext, out_dir: Path) -> list[Plot]:
    return plot_lm_positions(context, out_dir) + plot_lm_long_positions(context, out_dir)


def decode_points(results: Results) -> pd.DataFrame:
    """Each label's decode rows, means over seeds: context_length, decode_ms_per_token, prefill tokens/s, bytes,
    and where the step was timed in alternation with a paired attention (the timing check) the median pair ratio,
    the pairs pooled over seeds and the verdict of the inference engine's sign tests (`attnbench.decisions.signs`:
    ahead = this step faster, behind, equivalent within the ratio's margin, undecided; Holm over every checked
    point of the table)."""
    rows = detail_rows(results, "decode")
    if rows.empty:
        return rows
    columns = ["decode_ms_per_token", "prefill_tokens_per_s", "state_bytes"]
    for column in ("paired_ratio", "pairs", "pairs_faster", "pairs_slower"):
        rows[column] = pd.to_numeric(rows[column], errors="coerce") if column in rows else np.nan
    if "pair_ratios" not in rows:
        rows["pair_ratios"] = None
    rows["pairs_slower"] = rows["pairs_slower"].fillna(rows["pairs"] - rows["pairs_faster"])  # runs before ties counted
    keys = ["task", "label", "attention", "context_length"]
    points = rows.groupby(keys, as_index=False)[columns + ["paired_ratio"]].mean()
    pooled = rows.groupby(keys, as_index=False).agg(
        checked=("pairs", lambda x: bool(x.notna().all())),
        pairs=("pairs", "sum"),
        pairs_faster=("pairs_faster", "sum"),
        pairs_slower=("pairs_slower", "sum"),
        ratios=("pair_ratios", _pooled_ratios),
    )
    points = points.merge(pooled, on=keys)
    checked = points[points["checked"]]
    points["verdict"], points["p_adjusted"] = None, np.nan
    if len(checked):
        settings = inference.run_settings(results)
        given = settings.margin("decode_paired_ratio")
        margin = given if given is not None else (metric_info("decode_paired_ratio@1") or MARGINLESS).margin
        found = timing_verdicts(checked["pairs_faster"], checked["pairs_slower"], list(checked["ratios"]),
                                float(margin or 0.0), alpha=inference.ALPHA, correction=settings.correction)  # fmt: skip
        points.loc[checked.index, "verdict"] = found["verdict"]
        points.loc[checked.index, "p_adjusted"] = found["p_adjusted"]
    return points


MARGINLESS = MetricInfo("none", None, "")


def _pooled_ratios(stored: pd.Series) -> np.ndarray | None:
    """Every seed's pair ratios of one point, or None where a seed did not store them (runs before they were)."""
    if not all(isinstance(r, list) and r for r in stored):
        return None
    return np.concatenate([np.asarray(r, dtype=float) for r in stored])


def crossover(points: pd.DataFrame, label: str) -> float:
    """The shortest measured context from which on `label`'s decoding step was detectably faster than the paired
    (softmax's) step at every longer measured context, by the timing check (NaN: not even at the longest, or no
    timing check ran); `points` of one task."""
    mine = points[points["label"] == label].set_index("context_length").sort_index()
    start = float("nan")
    for n in reversed(list(mine.index)):
        if not (mine.at[n, "checked"] and mine.at[n, "verdict"] == "ahead"):
            break
        start = float(n)
    return start


TIMING_WORDS = {"ahead": "faster", "behind": "slower", "equivalent": "≈ (within the margin)", "undecided": "undecided"}


def _verdict_text(point: pd.Series) -> str:
    """'1.42× faster (64/64)' from a point's timing check, or a dash without one."""
    if not point["checked"] or not np.isfinite(point["paired_ratio"]):
        return DASH
    word = TIMING_WORDS.get(point["verdict"], DASH)
    return f"{point['paired_ratio']:.2f}× {word} ({int(point['pairs_faster'])}/{int(point['pairs'])})"


def paired_name(results: Results) -> str:
    """The attention the decode steps were timed against (the option `paired`; softmax by default), or a
    generic name where the cells name different ones."""
    names = {
        ((c["details"] or {}).get("paired") or {}).get("name")
        for _, c in results.of("decode").iterrows()
        if (c["details"] or {}).get("paired")
    }
    return names.pop() if len(names) == 1 else SOFTMAX if not names else "the paired attention"


def decode_crossover_table(results: Results) -> Table | None:
    """Per label: decoding ms per token at the shortest and longest context, state bytes, and the crossover."""
    points = decode_points(results)
    if points.empty:
        return None
    other = paired_name(results)
    column = f"faster than {other} from"
    shortest, longest = points["context_length"].min(), points["context_length"].max()
    keys = row_keys(points)
    data, text = [], []
    for (task, label, attention), part in points.groupby(["task", "label", "attention"], sort=True):
        part = part.set_index("context_length")
        paired = bool(part["checked"].any())
        rec = {
            **_row(keys, (task, label)[-len(keys) :]),
            f"ms/token @{shortest}": part["decode_ms_per_token"].get(shortest, np.nan),
            f"ms/token @{longest}": part["decode_ms_per_token"].get(longest, np.nan),
            f"state bytes @{longest}": part["state_bytes"].get(longest, np.nan),
            column: crossover(points[points["task"] == task], label) if paired else np.nan,
        }
        data.append(rec)
        shown = {k: (v if k in keys else fmt(v, 0 if "bytes" in k or "from" in k else None)) for k, v in rec.items()}
        if attention == other and not paired:
            shown[column] = "(reference)"
        elif not paired:
            shown[column] = "no timing check"
        text.append(shown)
    data, text = pd.DataFrame(data), pd.DataFrame(text)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    notes = [
        (
            "Median wall time of one decoding step (batch 1, float32, from the prefilled state) and the state or "
            f"KV cache bytes per sequence and layer. '{column}': the shortest measured context from "
            f"which on the label's step was detectably faster than {other}'s at every longer one, by the timing "
            "check (the two steps timed in alternation, pair after pair; the inference engine's sign test on the "
            "pairs, Holm's correction over every checked point); a dash: not even at the longest measured. Times "
            "are not ranked."
        )
    ]
    return Table(
        "decode_crossover", "Decoding cost against context length", data, text, best, notes, key_columns=len(keys)
    )


def decode_paired_table(results: Results) -> Table | None:
    """Per label (rows) and context length (columns): the timing check against the paired attention."""
    points = decode_points(results)
    if points.empty or not points["checked"].any():
        return None
    points, other = points[points["checked"]], paired_name(results)
    lengths = sorted(points["context_length"].unique())
    keys = row_keys(points)
    data, text = [], []
    for key, part in points.groupby(keys if len(keys) > 1 else keys[0], sort=True):
        part = part.set_index("context_length")
        rec, row = _row(keys, key), _row(keys, key)
        for n in lengths:
            point = part.loc[n] if n in part.index else None
            rec[f"ratio @{n}"] = point["paired_ratio"] if point is not None else np.nan
            rec[f"verdict @{n}"] = None if point is None else point["verdict"]
            row[f"@{n}"] = _verdict_text(point) if point is not None else DASH
        data.append(rec)
        text.append(row)
    text = pd.DataFrame(text)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    notes = [
        (
            f"The timing check of each decoding step against {other}'s at each context length: the median over "
            f"alternated pairs of {other}'s step time / this one's (> 1: this one is faster), pooled over seeds; "
            "the inference engine's verdict (attnbench.decisions.signs): faster / slower where the exact two-sided "
            "sign test over the pairs separates them after Holm's correction over every cell of this table, ≈ "
            "where two one-sided sign tests put the median ratio within the ratio's margin (runs that stored each "
            "pair's ratio), else undecided; (pairs where this one was faster / pairs). Consecutive pairs share "
            "the machine's state, so the tests read as a check on the direction, not a precise p."
        )
    ]
    return Table(
        "decode_paired",
        f"Decoding step against {other}'s, timed in alternation",
        pd.DataFrame(data),
        text,
        best,
        notes,
        key_columns=len(keys),
    )


def plot_decode(context: ReportContext, out_dir: Path) -> list[Plot]:
    """Decoding ms per token and prefill tokens/s against context length (log-log), a line per label."""
    points = decode_points(context.results)
    if points.empty:
        return []
    colors = causal_colors(context.results)
    several = points["task"].nunique() > 1
    fig = new_figure(7.5, 3.3)
    axes = fig.subplots(1, 2)
    for (task, label), part in points.groupby(["task", "label"], sort=True):
        part = part.sort_values("context_length")
        shown = f"{label} · {task}" if several else label
        for ax, column in zip(axes, ("decode_ms_per_token", "prefill_tokens_per_s")):
            ax.plot(part["context_length"], part[column], marker="o", label=shown, color=colors.get(label))
    for ax, ylabel in zip(axes, ("ms per decoded token", "prefill tokens / s")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context length")
        ax.set_ylabel(ylabel)
    legend_below(fig, axes)
    return [
        save_plot(fig, out_dir, "decode_crossover", "Decoding latency and prefill throughput against context length")
    ]


register_report_section("recall", order=80, tables=lambda results: [recall_table(results)], plots=_recall_plots)
register_report_section("lm", order=85, tables=lambda results: [lm_positions_table(results)], plots=_lm_plots)
register_report_section(
    "decode",
    order=90,
    tables=lambda results: [decode_crossover_table(results), decode_paired_table(results)],
    plots=plot_decode,
)
