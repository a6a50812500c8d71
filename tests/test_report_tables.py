"""Report tables: aggregation on hand-made cell results, and every text format produced and parseable."""

from __future__ import annotations

import itertools
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from processes import HANG_GUARD
from report_fixture import make_fake_run, write_cell
from scipy import stats
from statsmodels.stats.multitest import multipletests

from attnbench.errors import UserError
from attnbench.report import write_leaderboard, write_report
from attnbench.report.efficiency import efficiency_frame
from attnbench.report.fidelity import fidelity_table
from attnbench.report.formats import latex_escape, to_latex, to_markdown, write_table
from attnbench.report.load import detail_rows, load_runs, run_provenance
from attnbench.report.robustness import robustness_tables
from attnbench.report.stats import metric_direction
from attnbench.report.tables import all_tables, leaderboard_table, task_table

# accuracy, ece per (task, label) over seeds 0, 1, 2; "c" has no result on task "t2" (it failed there)
ACC = {
    ("t1", "a"): [0.80, 0.82, 0.84],
    ("t1", "b"): [0.70, 0.71, 0.75],
    ("t1", "c"): [0.90, 0.90, 0.93],
    ("t2", "a"): [0.60, 0.64, 0.62],
    ("t2", "b"): [0.66, 0.68, 0.70],
}
ECE = {
    ("t1", "a"): [0.05, 0.07, 0.06],
    ("t1", "b"): [0.02, 0.03, 0.04],
    ("t1", "c"): [0.10, 0.12, 0.11],
    ("t2", "a"): [0.09, 0.08, 0.07],
    ("t2", "b"): [0.01, 0.02, 0.03],
}


@pytest.fixture
def hand_run(tmp_path: Path) -> Path:
    for (task, label), accs in ACC.items():
        for seed, (acc, ece) in enumerate(zip(accs, ECE[(task, label)])):
            write_cell(
                tmp_path,
                label=label,
                attention="softmax" if label == "a" else "performer",
                task=task,
                seed=seed,
                metrics={
                    "accuracy": acc,
                    "macro_f1": acc - 0.1,
                    "ece": ece,
                    "train_seconds": 10.0 + seed,
                    "params_total": 1000.0,
                    "params_attention": 150.0 if label == "c" else 100.0,
                },
            )
    write_cell(
        tmp_path,
        label="c",
        attention="performer",
        task="t2",
        seed=0,
        status="failed",
        reason="RuntimeError: out of memory",
    )
    return tmp_path


def holm_detected(values: dict[str, list[float]]) -> dict[tuple[str, str], bool]:
    """Independently of the engine: every pair's paired t-test over seeds (scipy), Holm's correction (statsmodels)."""
    pairs = list(itertools.combinations(sorted(values), 2))
    p = [stats.ttest_rel(values[a], values[b]).pvalue for a, b in pairs]
    return dict(zip(pairs, multipletests(p, method="holm")[0]))


def test_task_table_intervals_ranks_and_best_set_by_hand(hand_run: Path) -> None:
    table = task_table(load_runs([hand_run]), "t1")
    data = table.data.set_index("label")
    for label in "abc":
        acc = ACC[("t1", label)]
        half = stats.t.isf(0.025, 2) * np.std(acc, ddof=1) / np.sqrt(3)  # seeds only: these cells store no outcomes
        assert data.at[label, "accuracy_mean"] == pytest.approx(np.mean(acc))
        assert data.at[label, "accuracy_low"] == pytest.approx(max(0.0, np.mean(acc) - half))
        assert data.at[label, "accuracy_high"] == pytest.approx(min(1.0, np.mean(acc) + half))
        assert data.at[label, "accuracy_n"] == 3
        assert data.at[label, "ece_mean"] == pytest.approx(np.mean(ECE[("t1", label)]))
    # ranks by mean, never against it: c > a > b on accuracy; lower ECE is better: b < a < c
    assert list(data["accuracy_rank"].loc[["c", "a", "b"]]) == [1, 2, 3]
    assert list(data["ece_rank"].loc[["b", "a", "c"]]) == [1, 2, 3]
    assert list(table.text["label"]) == ["c", "a", "b"]  # by the headline metric's rank
    detected = holm_detected({lab: ACC[("t1", lab)] for lab in "abc"})
    best = {lab for lab in "abc" if not any(detected[tuple(sorted((lab, o)))] and np.mean(ACC[("t1", o)])
            > np.mean(ACC[("t1", lab)]) for o in "abc" if o != lab)}  # fmt: skip
    marks = table.best.set_index(table.text["label"])["accuracy"]
    assert {lab for lab in "abc" if marks[lab]} == (best if len(best) < 3 else set())
    assert set(data.index[data["accuracy_best_set"].astype(bool)]) == best
    text = table.text.set_index("label")
    assert "(seeds 0.900 0.900 0.930)" in text.at["c", "accuracy"] and "rank 1" in text.at["c", "accuracy"]
    assert (text.at["c", "params"], text.at["c", "attention params"], text.at["a", "attention params"]) == (
        "1,000",
        "150",
        "100",
    )
    assert "params_total" not in table.text.columns and not table.best["train_seconds"].any()
    assert "rank" not in text.at["c", "train_seconds"]  # times are not ranked
    assert "Holm" in " ".join(table.notes) and "Seeds only on t1 (accuracy, ece, macro_f1, train_seconds)" in " ".join(
        table.notes
    )
    md, latex = to_markdown(table), to_latex(table)
    for lab in best if len(best) < 3 else ():
        assert f"**{text.at[lab, 'accuracy']}**" in md and re.search(
            r"\\textbf\{" + re.escape(text.at[lab, "accuracy"][:5]), latex
        )


def test_leaderboard_ranks_each_task_and_leaves_missing_cells_out(hand_run: Path) -> None:
    table = leaderboard_table(load_runs([hand_run]))
    data = table.data.set_index("label")
    assert data.at["c", "t1:mean"] == pytest.approx(np.mean(ACC[("t1", "c")]))
    assert pd.isna(data.at["c", "t2:mean"]) and data.at["c", "tasks"] == 1
    assert (data.at["c", "t1:rank"], data.at["a", "t1:rank"], data.at["b", "t1:rank"]) == (1, 2, 3)
    assert (data.at["b", "t2:rank"], data.at["a", "t2:rank"]) == (1, 2)
    assert data.at["a", "mean_rank"] == pytest.approx(2.0)
    for task, labels in (("t1", "abc"), ("t2", "ab")):
        detected = holm_detected({lab: ACC[(task, lab)] for lab in labels})
        for lab in labels:
            beaten = any(detected[tuple(sorted((lab, o)))] and np.mean(ACC[(task, o)]) > np.mean(ACC[(task, lab)])
                         for o in labels if o != lab)  # fmt: skip
            assert bool(data.at[lab, f"{task}:best_set"]) == (not beaten)
    text = table.text.set_index("label")
    assert text.at["c", "t2 accuracy"] == "—" and text.at["c", "tasks"] == "1/2"
    footnote = " ".join(table.notes)
    assert "c × t2" in footnote and "out of memory" in footnote and "never counted as zero" in footnote
    order = data.assign(b=-data["best_set_tasks"]).sort_values(["b", "mean_rank"]).index
    assert list(table.text["label"]) == list(order)


def test_efficiency_ratios_against_softmax_of_the_same_run(tmp_path: Path) -> None:
    def rows(scale: float, oom_at: int | None) -> list[dict]:
        return [
            {
                "seq_len": n,
                "batch": 2,
                "heads": 1,
                "head_dim": 8,
                "mode": "forward",
                "status": "oom" if n == oom_at else "ok",
                "reason": "out of memory" if n == oom_at else None,
                **(
                    {}
                    if n == oom_at
                    else {
                        "median_ms": scale * n,
                        "q25_ms": scale * n,
                        "q75_ms": scale * n,
                        "tokens_per_s": 2 * n / (scale * n / 1000),
                        "peak_mem_bytes": scale * n * 1000.0,
                    }
                ),
            }
            for n in (64, 128, 256)
        ]

    write_cell(
        tmp_path,
        label="softmax",
        attention="softmax",
        task="none",
        measurement="efficiency",
        details={"rows": rows(2.0, 256)},
    )
    write_cell(
        tmp_path,
        label="lin",
        attention="performer",
        task="none",
        measurement="efficiency",
        details={"rows": rows(0.5, None)},
    )
    eff = efficiency_frame(load_runs([tmp_path])).set_index(["label", "seq_len"])
    assert eff.at[("lin", 64), "speed_vs_softmax"] == pytest.approx(4.0)
    assert eff.at[("lin", 128), "memory_vs_softmax"] == pytest.approx(0.25)
    assert eff.at[("softmax", 256), "status"] == "oom" and math.isnan(eff.at[("lin", 256), "speed_vs_softmax"])
    table = all_tables(load_runs([tmp_path]))[0]
    assert table.name == "efficiency" and "OOM" in set(table.text["time ms (q25–q75)"])


def test_efficiency_leaves_starved_and_unchecked_busy_points_out_of_ratios(tmp_path: Path) -> None:
    """A point refused as not measured, and a busy point from a run that did not check for starvation, have no time
    or ratio and say why; a busy point that passed the check keeps its time with the mark; a quiet one neither."""

    def row(n: int, busy: bool, checked: bool | None, status: str = "ok") -> dict:
        timed = {"median_ms": 1.0, "q25_ms": 1.0, "q75_ms": 1.0, "tokens_per_s": 1.0} if status == "ok" else {}
        return {
            "seq_len": n,
            "batch": 1,
            "heads": 1,
            "head_dim": 8,
            "mode": "forward",
            "status": status,
            "reason": "not measured: the timed threads waited" if status != "ok" else None,
            "peak_mem_bytes": 1.0,
            "busy": busy,
            "others_cores": 1.5 if busy else 0.0,
            "cpu_availability": 0.4 if busy else 1.0,
            "load_1m": 4.0 if busy else 0.2,
            **timed,
            **({} if checked is None else {"starvation_checked": checked}),
        }

    write_cell(
        tmp_path,
        label="lin",
        attention="performer",
        task="none",
        measurement="efficiency",
        details={
            "rows": [
                row(64, True, None),
                row(128, False, True),
                row(256, True, True),
                row(512, False, True, "not_measured"),
            ]
        },
    )
    write_cell(
        tmp_path,
        label="softmax",
        attention="softmax",
        task="none",
        measurement="efficiency",
        details={"rows": [row(n, False, True) for n in (64, 128, 256, 512)]},
    )
    results = load_runs([tmp_path])
    eff = efficiency_frame(results).set_index(["label", "seq_len"])
    assert eff.at[("lin", 64), "status"] == "not_measured" and "busy machine" in eff.at[("lin", 64), "reason"]
    assert math.isnan(eff.at[("lin", 64), "speed_vs_softmax"]) and math.isnan(eff.at[("lin", 512), "speed_vs_softmax"])
    assert eff.at[("lin", 128), "speed_vs_softmax"] == pytest.approx(1.0)
    table = all_tables(results)[0]
    text = table.text[table.text["label"] == "lin"].set_index("seq_len")
    assert text.at["64", "time ms (q25–q75)"] == "NOT MEASURED" == text.at["512", "time ms (q25–q75)"]
    assert text.at["256", "time ms (q25–q75)"].endswith("†") and not text.at["128", "time ms (q25–q75)"].endswith("†")
    assert text.at["256", "machine"] == "busy: others 1.50 cores, core share 0.40, load 4.0"
    assert "not measured" in text.at["64", "status"] and "others 1.50 cores" in text.at["64", "status"]
    out = write_report(tmp_path)
    assert "2 point(s) not measured" in (out / "report.md").read_text()


def test_paired_table_lists_the_alternated_timings(tmp_path: Path) -> None:
    row = {
        "seq_len": 64,
        "batch": 1,
        "heads": 2,
        "head_dim": 8,
        "mode": "forward",
        "status": "ok",
        "reason": None,
        "median_ms": 2.0,
        "q25_ms": 2.0,
        "q75_ms": 2.0,
        "tokens_per_s": 1.0,
        "peak_mem_bytes": 1.0,
        "paired_label": "theirs",
        "paired_median_ms": 5.0,
        "paired_ratio": 2.4,
        "paired_ratio_q25": 2.2,
        "paired_ratio_q75": 2.6,
    }
    write_cell(
        tmp_path, label="ours", attention="performer", task="none", measurement="efficiency", details={"rows": [row]}
    )
    write_cell(
        tmp_path,
        label="plain",
        attention="softmax",
        task="none",
        measurement="efficiency",
        details={"rows": [{k: v for k, v in row.items() if not k.startswith("paired")}]},
    )
    tables = {t.name: t for t in all_tables(load_runs([tmp_path]))}
    text = tables["paired_timing"].text
    assert list(text["label"]) == ["ours"] and list(text["paired with"]) == ["theirs"]
    assert text["paired / this (q25–q75)"].iloc[0] == "2.40 (2.20–2.60)"


def test_robustness_tables_from_fake_run(tmp_path: Path) -> None:
    results = load_runs([make_fake_run(tmp_path / "run", tasks=("sst2",), labels=("softmax", "kernel-favor"))])
    raw = detail_rows(results, "robustness")
    rob = robustness_tables(results)[0].data
    pick = rob[(rob["label"] == "softmax") & (rob["perturbation"] == "delete") & (rob["level"] == 0.2)]
    expect = raw[(raw["label"] == "softmax") & (raw["corruption"] == "delete") & (raw["severity"] == 0.2)]
    assert pick["accuracy_mean"].item() == pytest.approx(expect["accuracy"].mean())
    assert pick["accuracy_n"].item() == 3
    auc = robustness_tables(results)[0].text.set_index(["label", "perturbation"])
    assert auc.at[("softmax", "delete"), "AUC"] == "0.730 ± 0.000"  # robustness_auc_delete: mean ± std
    budget = robustness_tables(results)[1]
    assert budget.name == "robustness_feature_budget" and set(budget.text["label"]) == {"kernel-favor"}
    assert budget.data.set_index("level").at[16, "accuracy_mean"] == pytest.approx(0.79 - 0.05)


def test_robustness_bold_is_the_best_set(tmp_path: Path) -> None:
    """Bold marks the labels no other label is detectably better than (the engine, Holm), where that leaves one out."""
    run = tmp_path / "run"
    clean = {"steady": (0.9, 0.91, 0.89), "behind": (0.7, 0.72, 0.69), "noisy": (0.95, 0.6, 0.9)}
    for label, values in clean.items():
        for seed, value in enumerate(values):
            rows = [{"kind": "corruption", "corruption": "delete", "severity": 0.1, "status": "ok",
                     "accuracy": value, "ece": 0.05}]  # fmt: skip
            metrics = {"robustness_auc": value, "robustness_auc_delete": value}
            write_cell(run, label=label, seed=seed, measurement="robustness", metrics=metrics, details={"rows": rows})
    table = robustness_tables(load_runs([run]))[0]
    bold = dict(zip(table.text["label"], table.best["acc@0.1"]))
    # steady is best by mean; noisy's gap to it is within its seed spread, behind's is steady: left out
    assert bold == {"steady": True, "noisy": True, "behind": False}
    assert not table.best["ece@0.1"].any()  # every label's ECE is the same: one group, nobody singled out


def test_failed_skipped_unreadable_cells_are_listed(tmp_path: Path) -> None:
    results = load_runs([make_fake_run(tmp_path / "run", tasks=("listops", "rotten_tomatoes"))])
    counts = results.cells["status"].value_counts()
    assert (counts["failed"], counts["skipped"], counts["unreadable"]) == (1, 3, 1)
    problems = next(t for t in all_tables(results) if t.name == "cells_not_ok")
    assert "NonFiniteLossError: loss became nan at epoch 2" in set(problems.text["reason"])
    prov = run_provenance(results)[0]
    assert prov["cells"]["failed"] == 1 and prov["seeds"] == [0, 1, 2] and prov["git_commit"] == ["0bf2ea5deadbeef"]
    assert prov["cells"]["not run"] == 1 and prov["not_run_cell_ids"] == ["ffffffffffffffff"]
    assert prov["suite"] == ["smoke"]
    assert prov["native_kernels"] == ["on (g++ -O3 -march=native)"]


def test_every_format_written_and_parses(tmp_path: Path) -> None:
    results = load_runs([make_fake_run(tmp_path / "run")])
    for table in all_tables(results):
        paths = write_table(table, tmp_path / "tables")
        back = pd.read_csv(paths["csv"])
        expected = table.data.reset_index(drop=True)
        expected = expected.astype({c: float for c in expected.columns if str(expected[c].dtype) == "Int64"})
        pd.testing.assert_frame_equal(back, expected, check_dtype=False, check_exact=False, rtol=1e-12)
        md = paths["md"].read_text().splitlines()
        rows = [line for line in md if line.startswith("|")]
        assert len(rows) == len(table.text) + 2 and len({r.count(" | ") for r in rows}) == 1
        _check_latex(paths["tex"].read_text(), len(table.text.columns))


def _check_latex(tex: str, ncols: int) -> None:
    body = "\n".join(line for line in tex.splitlines() if not line.startswith("%"))
    assert re.findall(r"\\begin\{(\w+)\}", body) == ["table", "tabular"]
    assert re.findall(r"\\end\{(\w+)\}", body) == ["tabular", "table"]
    assert body.index(r"\toprule") < body.index(r"\midrule") < body.index(r"\bottomrule")
    assert body.count("{") == body.count("}")
    stripped = re.sub(r"\\[_%&#$]", "", re.sub(r"\{%$", "{", body, flags=re.M))  # line-end % of resizebox
    assert not re.search(r"[_%#]", stripped), "unescaped LaTeX special character"
    assert "±" not in body and "—" not in body
    rows = [line for line in body.splitlines() if line.endswith(r"\\")]
    assert all(len(re.split(r"(?<!\\)&", row)) == ncols for row in rows)


def test_latex_escapes_specials() -> None:
    assert (
        latex_escape("lin_attn&50%#{x}~^\\")
        == r"lin\_attn\&50\%\#\{x\}\textasciitilde{}\textasciicircum{}\textbackslash{}"
    )


def test_latex_compiles_with_pdflatex(tmp_path: Path) -> None:
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex not installed; well-formedness is checked in test_every_format_written_and_parses")
    run = make_fake_run(tmp_path / "run", tasks=("sst2",), labels=("softmax", "kernel-favor"))
    write_cell(run, label="lin_attn&50%#~^{x}", attention="performer", task="sst2", metrics={"accuracy": 0.5})
    tex = "\n".join(to_latex(t) for t in all_tables(load_runs([run])))  # narrow and wide tables
    doc = tmp_path / "doc.tex"
    doc.write_text(
        "\\documentclass{article}\\usepackage[utf8]{inputenc}\\usepackage{booktabs}\\usepackage{graphicx}"
        "\\begin{document}\n" + tex + "\n\\end{document}\n"
    )
    proc = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (tmp_path / "doc.pdf").stat().st_size > 10_000


def test_leaderboard_merge_tags_clashing_labels(tmp_path: Path) -> None:
    for run, acc in (("cpu", 0.7), ("gpu", 0.8)):
        write_cell(tmp_path / run, label="softmax", task="t1", seed=0, metrics={"accuracy": acc})
    write_cell(tmp_path / "gpu", label="only-gpu", task="t1", seed=0, metrics={"accuracy": 0.5})
    out = write_leaderboard([tmp_path / "cpu", tmp_path / "gpu"], tmp_path / "board")
    board = pd.read_csv(out / "tables" / "leaderboard.csv").set_index("label")
    assert board.at["softmax [cpu]", "t1:mean"] == pytest.approx(0.7)
    assert board.at["softmax [gpu]", "t1:mean"] == pytest.approx(0.8)
    assert "only-gpu" in board.index
    prov = (out / "provenance.json").read_text()
    assert '"run": "cpu"' in prov and '"run": "gpu"' in prov


def test_missing_run_folder_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cells"):
        load_runs([tmp_path / "nowhere"])


def test_plug_in_measurement_gets_its_own_table(tmp_path: Path) -> None:
    for seed, score in enumerate((1.0, 3.0)):
        write_cell(tmp_path, label="a", task="t1", measurement="echo", seed=seed, metrics={"score": score})
    table = next(t for t in all_tables(load_runs([tmp_path])) if t.name == "echo_t1")
    assert table.data.at[0, "score_mean"] == pytest.approx(2.0) and table.data.at[0, "score_n"] == 2


def test_counts_are_ranked_by_value_without_an_interval_or_a_rank_set(tmp_path: Path) -> None:
    """The decode report showed a state's bytes as '33,280 (rank 1, 1–5)': one seed made a counted number look
    uncertain. Counts (declared exact) rank by value, ties sharing a rank, with no interval and no rank set."""
    state = {"softmax": (16400.0, 1049600.0), "elu-linear": (33280.0, 33280.0), "vanilla": (33280.0, 33280.0)}
    for label, (short, long) in state.items():
        for seed in (0, 1) if label == "elu-linear" else (0,):  # two seeds, the same count on both
            metrics = {"state_bytes@16": short, "state_bytes@1024": long, "decode_ms_per_token@16": 1.0 + seed}
            write_cell(tmp_path, label=label, task="byte_lm", measurement="state", seed=seed, metrics=metrics)
    table = next(t for t in all_tables(load_runs([tmp_path])) if t.name == "state_byte_lm")
    shown = table.text.set_index("label")
    assert dict(shown["state_bytes@16"]) == {
        "softmax": "16,400 (rank 1)",
        "elu-linear": "33,280 (rank 2)",
        "vanilla": "33,280 (rank 2)",
    }
    assert dict(shown["state_bytes@1024"]) == {
        "elu-linear": "33,280 (rank 1)",
        "vanilla": "33,280 (rank 1)",
        "softmax": "1,049,600 (rank 3)",
    }
    bold = table.best.set_index(table.text["label"])
    assert list(bold.index[bold["state_bytes@16"]]) == ["softmax"]  # the best value, known exactly
    assert sorted(bold.index[bold["state_bytes@1024"]]) == ["elu-linear", "vanilla"]
    assert any(n.startswith("Exact (state_bytes@1024, state_bytes@16): counts") for n in table.notes)
    assert table.data.set_index("label").loc["softmax", "state_bytes@16_rank_high"] == 1


def test_sparse_and_failed_runs_still_give_a_report(tmp_path: Path) -> None:
    write_cell(tmp_path / "a", label="a", task="t1", status="failed", reason="boom")
    write_cell(tmp_path / "a", label="b", task="t1", status="skipped", reason="no padding mask")
    out = write_report(tmp_path / "a")
    board = (out / "tables" / "leaderboard.md").read_text()
    assert "a × t1 (failed: boom)" in board and "b × t1 (skipped: no padding mask)" in board
    assert (out / "index.html").exists() and (out / "plots").is_dir()
    write_cell(
        tmp_path / "b",
        label="a",
        task="none",
        measurement="efficiency",
        details={"rows": [{"seq_len": 64, "status": "ok", "median_ms": 1.0, "tokens_per_s": 5.0}]},
    )
    write_cell(
        tmp_path / "b",
        label="k",
        task="none",
        measurement="fidelity",
        details={"rows": [{"seq_len": 64, "inputs": "random", "num_features": None, "rel_error": 0.1}]},
    )
    out = write_report(tmp_path / "b")
    assert {p.name for p in (out / "tables").glob("*.csv")} == {"efficiency.csv", "fidelity.csv"}


def test_fidelity_table_flags_estimates_near_uniform_attention(tmp_path: Path) -> None:
    for label, error, away in (("floor", 0.4, 0.06), ("kernel", 0.5, 0.8), ("noisy", 0.6, 1.5)):
        write_cell(
            tmp_path,
            label=label,
            task="none",
            measurement="fidelity",
            details={
                "rows": [
                    {
                        "seq_len": 64,
                        "inputs": "random",
                        "num_features": None,
                        "rel_error": error,
                        "uniform_rel_error": 0.45,
                        "from_uniform": away,
                    }
                ]
            },
        )
    table = fidelity_table(load_runs([tmp_path]))
    shown = dict(zip(table.text["label"], table.text["from uniform"]))
    assert shown == {"floor": "0.060 (≈ uniform)", "kernel": "0.800", "noisy": "1.500"}
    assert list(table.text["uniform's error"]) == ["0.450"] * 3
    bold = dict(zip(table.text["label"], table.best["relative error"]))
    assert bold == {"floor": False, "kernel": True, "noisy": False}  # the collapsed estimate is not the best


def test_metric_directions() -> None:
    higher = [
        "accuracy",
        "macro_f1",
        "weighted_f1",
        "mcc",
        "balanced_accuracy",
        "roc_auc",
        "pr_auc",
        "clean_accuracy",
        "robustness_auc",
        "forward_tokens_per_s@1024",
        "label_noise_accuracy@0.2",
    ]
    lower = [
        "ece",
        "ece_equal_mass",
        "nll",
        "brier",
        "train_seconds",
        "phase_a_seconds",
        "forward_ms@4096",
        "forward_peak_mem_bytes@4096",
        "rel_error",
    ]
    assert all(metric_direction(m) == "max" for m in higher), [m for m in higher if metric_direction(m) != "max"]
    assert all(metric_direction(m) == "min" for m in lower), [m for m in lower if metric_direction(m) != "min"]
    assert metric_direction("params_total") is None


def test_one_task_run_with_two_option_sets_is_two_tasks(tmp_path: Path) -> None:
    for length, acc in ((512, 0.6), (1024, 0.5)):
        write_cell(
            tmp_path,
            label="a",
            task="listops",
            task_options={"max_length": length, "seed_split": 1},
            metrics={"accuracy": acc},
        )
    board = leaderboard_table(load_runs([tmp_path])).data
    assert board.at[0, "listops(max_length=512):mean"] == pytest.approx(0.6)
    assert board.at[0, "listops(max_length=1024):mean"] == pytest.approx(0.5)
