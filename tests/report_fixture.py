"""Writers of cell result files (DESIGN.md schema 1) for report tests: single cells and a realistic fake run."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

LABELS = {
    "softmax": "softmax",
    "performer-256": "performer",
    "kernel-favor": "coulomb",
    "vanilla-favor": "random_features",
    "elu": "elu_linear",
    "nystrom-64": "nystromformer",
}
TASKS = ("sst2", "listops", "rotten_tomatoes")
SEEDS = (0, 1, 2)


def provenance(seed: int, device: str = "cpu") -> dict[str, Any]:
    """A provenance block like the executor's."""
    return {
        "attnbench_version": "0.1.0",
        "git_commit": "0bf2ea5deadbeef",
        "git_dirty": False,
        "python": "3.11.9",
        "torch": "2.13.0",
        "packages": {"numpy": "2.4.6"},
        "platform": "Linux-6.1-x86_64",
        "machine": "x86_64",
        "cpu": "Test CPU @ 2.0GHz",
        "device": device,
        "threads": 2,
        "native_kernels": "on (g++ -O3 -march=native)",
        "hostname": "testhost",
        "started_at": "2026-11-29T10:00:00Z",
        "finished_at": "2026-11-29T10:01:00Z",
        "seconds": 60.0,
        "seed": seed,
        "command": "attnbench run smoke",
    }


def write_cell(
    run_dir: Path,
    *,
    label: str,
    attention: str | None = None,
    task: str = "sst2",
    measurement: str = "accuracy",
    seed: int = 0,
    status: str = "ok",
    reason: str | None = None,
    metrics: dict[str, float] | None = None,
    details: dict[str, Any] | None = None,
    task_options: dict[str, Any] | None = None,
    suite: str = "smoke",
    device: str = "cpu",
    sweep: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
) -> Path:
    """Write one cell result file RUN_DIR/cells/<cell_id>.json and return its path (`sweep`: the cell's trial;
    `data`: the provenance's data block, e.g. {"task": name, "test_rows": "fresh"})."""
    cell = {
        "suite": suite,
        "task": {"name": task, "options": task_options or {}},
        "attention": {"name": attention or LABELS.get(label, label), "label": label, "options": {}},
        "seed": seed,
        "model": {},
        "training": {},
        "measurement": {"name": measurement, "options": {}},
    }
    if sweep is not None:
        cell["sweep"] = sweep
    cell_id = hashlib.sha256(json.dumps(cell, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    result = {
        "schema": 1,
        "cell_id": cell_id,
        "cell": cell,
        "label": label,
        "status": status,
        "reason": reason,
        "error": "Traceback ...\nRuntimeError: boom" if status == "failed" else None,
        "metrics": metrics or {},
        "details": details or {},
        "provenance": provenance(seed, device) | ({"data": data} if data is not None else {}),
    }
    path = run_dir / "cells" / f"{cell_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    return path


def _reliability(rng: np.random.Generator, acc: float) -> list[dict[str, float]]:
    bins = []
    for b in range(15):
        lower, upper = b / 15, (b + 1) / 15
        conf = (lower + upper) / 2
        count = int(rng.integers(0, 40)) if conf > 0.45 else 0
        bins.append(
            {
                "lower": lower,
                "upper": upper,
                "count": count,
                "confidence": conf if count else 0.0,
                "accuracy": float(np.clip(conf - 0.1 + 0.2 * acc + rng.normal(0, 0.03), 0, 1)) if count else 0.0,
            }
        )
    return bins


def _phase_a(rng: np.random.Generator, steps: int = 40) -> dict[str, Any]:
    diags = []
    for _layer in range(2):
        heads = []
        for _head in range(2):
            t = np.arange(steps)
            align = 0.05 + 0.2 * (1 - np.exp(-t / 10)) + rng.normal(0, 0.005, steps)
            energy = 1.0 + 0.3 * np.exp(-t / 15)
            heads.append(
                [
                    {
                        "H": float(-a + 1e-3 * e) if s else "nan",
                        "alignment": float(a),
                        "energy": float(e),
                        "max_move": float(0.1 * math.exp(-s / 8)),
                        "min_distance": 0.3,
                        "mean_norm": 1.0,
                    }
                    for s, (a, e) in enumerate(zip(align, energy))
                ]
            )
        diags.append(heads)
    return {
        "seconds": float(rng.uniform(5, 8)),
        "steps": steps,
        "alignment_before": 0.05,
        "alignment_after": float(0.24 + rng.normal(0, 0.01)),
        "diagnostics": diags,
        "objective": "within-class",
        "probe_split": "validation",
        "relative_move": 0.3,
        "validation_alignment": {
            k: {"before": 0.05, "after": float(0.2 + rng.normal(0, 0.01))}
            for k in ("within-class", "centered-kta", "input-kernel")
        },
        "walk": {
            "drift": 1e-4,
            "noise": (noise := float(0.07 + rng.normal(0, 0.002))),
            "drift_noise_ratio": 1e-4 / noise,
            "norm_before_projection": 1.5,
            "norm_after_projection": 1.49,
        },
        "distances_before": rng.gamma(4, 0.3, 300).tolist(),
        "distances_after": rng.gamma(9, 0.2, 300).tolist(),
    }


def make_fake_run(
    run_dir: Path,
    device: str = "cpu",
    seed: int = 0,
    tasks: tuple[str, ...] = TASKS,
    labels: tuple[str, ...] | None = None,
) -> Path:
    """A run folder with every measurement kind, failed/skipped/missing/unreadable cells; returns run_dir.

    Holes on purpose: performer-256 x listops seed 1 failed; nystrom-64 x rotten_tomatoes skipped (all seeds);
    elu x listops has no file at all; one cell file is not valid JSON; one planned cell (run.json) never ran;
    softmax OOMs at length 4096 and elu skips it (length cap).
    """
    rng = np.random.default_rng(seed)
    quality = {
        "softmax": 0.82,
        "performer-256": 0.76,
        "kernel-favor": 0.79,
        "vanilla-favor": 0.75,
        "elu": 0.77,
        "nystrom-64": 0.78,
    }
    quality = {k: v for k, v in quality.items() if labels is None or k in labels}
    for task in tasks:
        for label, base in quality.items():
            for s in SEEDS:
                if label == "elu" and task == "listops":
                    continue
                if label == "performer-256" and task == "listops" and s == 1:
                    write_cell(
                        run_dir,
                        label=label,
                        task=task,
                        seed=s,
                        status="failed",
                        reason="NonFiniteLossError: loss became nan at epoch 2",
                        device=device,
                    )
                    continue
                if label == "nystrom-64" and task == "rotten_tomatoes":
                    write_cell(
                        run_dir,
                        label=label,
                        task=task,
                        seed=s,
                        status="skipped",
                        reason="nystromformer needs max_length divisible by landmarks",
                        device=device,
                    )
                    continue
                acc = float(base - 0.1 * (task == "listops") + rng.normal(0, 0.01))
                metrics = {
                    "accuracy": acc,
                    "macro_f1": acc - 0.01,
                    "mcc": 2 * acc - 1,
                    "balanced_accuracy": acc,
                    "roc_auc": acc + 0.08,
                    "pr_auc": acc + 0.07,
                    "nll": 1.2 - acc,
                    "brier": 0.6 - 0.5 * acc,
                    "ece": float(abs(rng.normal(0.05, 0.02))),
                    "ece_equal_mass": 0.05,
                    "train_seconds": float(rng.uniform(50, 70) * (2 if label == "kernel-favor" else 1)),
                    "params_total": 412_000.0,
                    "params_attention": 66_000.0,
                }
                phase_a = _phase_a(rng) if label == "kernel-favor" else None
                if phase_a:
                    metrics["phase_a_seconds"] = phase_a["seconds"]
                details = {
                    "checkpoint": "best-validation (epoch 3)",
                    "history": [],
                    "reliability": _reliability(rng, acc),
                    "phase_a": phase_a,
                    "params": {},
                }
                write_cell(run_dir, label=label, task=task, seed=s, metrics=metrics, details=details, device=device)
        for label, base in quality.items():
            if task != "sst2":
                continue
            for s in SEEDS:
                rows = []
                for kind, corruption in (("corruption", "substitute"), ("corruption", "delete"), ("label_noise", None)):
                    for sev in (0.0, 0.1, 0.2, 0.4):
                        a = base - sev * (0.4 if label != "softmax" else 0.3) + rng.normal(0, 0.01)
                        rows.append(
                            {
                                "kind": kind,
                                "corruption": corruption,
                                "severity": sev,
                                "status": "ok",
                                "accuracy": float(a),
                                "ece": float(0.04 + sev * 0.2),
                            }
                        )
                for budget in (16, 64):
                    row = {"kind": "feature_budget", "num_features": budget, "severity": None}
                    rows.append(
                        row
                        | (
                            {"status": "skipped", "reason": "no num_features option", "accuracy": None, "ece": None}
                            if label == "softmax"
                            else {"status": "ok", "accuracy": float(base - 16 / budget * 0.05), "ece": 0.05}
                        )
                    )
                write_cell(
                    run_dir,
                    label=label,
                    task=task,
                    seed=s,
                    measurement="robustness",
                    metrics={
                        "clean_accuracy": base,
                        "clean_ece": 0.04,
                        "robustness_auc": base - 0.08,
                        "robustness_auc_substitute": base - 0.07,
                        "robustness_auc_delete": base - 0.09,
                        "label_noise_auc": base - 0.1,
                    },
                    details={"rows": rows},
                    device=device,
                )
    for label in quality:
        rows = []
        for n in (128, 256, 512, 1024, 2048, 4096):
            quadratic = label in ("softmax",)
            ms = (0.002 * n * n / 1000 if quadratic else 0.01 * n) * (1 + rng.normal(0, 0.02)) + 0.5
            mem = (n * n * 64 if quadratic else n * 4096) + 2**20
            status = "oom" if quadratic and n == 4096 else "skipped" if label == "elu" and n == 4096 else "ok"
            row = {
                "seq_len": n,
                "batch": 8,
                "heads": 2,
                "head_dim": 64,
                "mode": "forward",
                "status": status,
                "reason": {"oom": "CUDA out of memory", "skipped": "N=4096 is above the length cap 2048", "ok": None}[
                    status
                ],
                "repeats": 10,
                "dtype": "float32",
                "mem_method": "torch.cuda.max_memory_allocated",
                "flops": 1e9,
                "roofline_ms": ms / 4,
            }
            if status == "ok":
                row.update(
                    {
                        "median_ms": ms,
                        "q25_ms": ms * 0.97,
                        "q75_ms": ms * 1.03,
                        "tokens_per_s": 8 * n / (ms / 1000),
                        "peak_mem_bytes": float(mem),
                        "gflops_per_s": 1e9 / ms / 1e6,
                        "roofline_fraction": 0.25,
                    }
                )
            rows.append(row)
            if n <= 512:  # a training step (forward + backward) at the short lengths
                rows.append(
                    row
                    | {
                        "mode": "train",
                        "median_ms": 3 * ms,
                        "q25_ms": 2.9 * ms,
                        "q75_ms": 3.1 * ms,
                        "tokens_per_s": 8 * n / (3 * ms / 1000),
                        "peak_mem_bytes": float(2 * mem),
                    }
                )
        write_cell(
            run_dir,
            label=label,
            task="none",
            measurement="efficiency",
            metrics={"forward_ms@1024": rows[3]["median_ms"]},
            details={
                "rows": rows,
                "machine": {"matmul_gflops": 100.0, "copy_gb_per_s": 10.0, "threads": 2, "device": device},
            },
            device=device,
        )
        if label != "softmax":
            write_cell(
                run_dir,
                label=label,
                task="none",
                measurement="fidelity",
                metrics={},
                details={
                    "rows": [
                        {
                            "seq_len": n,
                            "num_features": 64,
                            "inputs": kind,
                            "rel_error": float(0.1 + 0.05 * rng.random()),
                            "max_abs_error": 0.3,
                        }
                        for n in (256, 1024)
                        for kind in ("random", "trained")
                    ]
                },
                device=device,
            )
    for s in SEEDS:
        rows = [
            {
                "part": part,
                "method": method,
                "sigma": sigma,
                "trial": trial,
                "n": 400,
                "accuracy": float(0.9 - 0.02 * math.log10(sigma + 1) + rng.normal(0, 0.01)),
                "f1": 0.85,
                "seconds": 0.5,
            }
            for part, methods in (
                (
                    "noise",
                    (
                        "logistic",
                        "rbf-svm gamma=0.5",
                        "rbf-svm gamma=100",
                        "rff",
                        "langevin lambda=0.5",
                        "langevin lambda=0",
                    ),
                ),
                ("ablation", ("langevin lambda=0", "langevin lambda=1.5")),
            )
            for method in methods
            for sigma in (1e-5, 1e-1, 1e3)
            for trial in (0, 1)
        ]
        for row in rows:
            if row["method"].startswith("langevin"):
                row.update(
                    drift_median=0.5,
                    noise_norm=1.9,
                    drift_to_noise=0.5 / 1.9,
                    clipped_share=0.2,
                    on_cap_share=0.9,
                    alignment_before=0.01,
                    alignment_after=0.02,
                    alignment_kept=0.03,
                )
        rows += [
            {
                "part": "scaling",
                "method": method,
                "sigma": 1e-5,
                "trial": 0,
                "n": n,
                "status": "ok",
                "accuracy": 0.6,
                "f1": 0.7,
                "seconds": 1e-3 * n**gamma,
            }
            for method, gamma in (("rff", 0.8), ("langevin lambda=0.5", 0.7))
            for n in (100, 1000, 10000)
        ]
        rows.append(
            {
                "part": "scaling",
                "method": "mkl",
                "sigma": 1e-5,
                "trial": 0,
                "n": 10000,
                "status": "skipped",
                "reason": "n=10000 above scaling_max_rows[mkl]=2000 (compute budget of the run)",
            }
        )
        fits = {
            "rff": {"exponent": 0.8, "intercept": 0.0, "r2": 1.0, "points": 3},
            "langevin lambda=0.5": {"exponent": 0.7, "intercept": 0.0, "r2": 1.0, "points": 3},
        }
        write_cell(
            run_dir,
            label="tabular",
            attention="none",
            task="none",
            measurement="kernel",
            seed=s,
            details={
                "rows": rows,
                "scaling_fits": fits,
                "bayes_accuracy": 0.76,
                "paper": {
                    "smallest_sigma_accuracy": {"rff": 0.56, "langevin lambda=0.5": 0.655},
                    "scaling_exponents": {"rff": 0.80, "mkl": 1.96},
                },
            },
            device=device,
        )
    (run_dir / "cells" / "0000broken000000.json").write_text("{not json")
    planned = sorted(p.stem for p in (run_dir / "cells").glob("*.json")) + ["ffffffffffffffff"]  # one never ran
    (run_dir / "run.json").write_text(json.dumps({"schema": 1, "suite": "smoke", "cell_ids": planned}))
    return run_dir
