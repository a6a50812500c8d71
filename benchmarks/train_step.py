"""Where a paper-scale training step spends its time, and the epoch time of each attention against softmax.

The paper's sentence model (2 layers, d_model 128, 2 heads, FFN 256, dropout 0.1, batch 64, AdamW with clipping as
attnbench.train runs it) on Rotten Tomatoes ($ATTNBENCH_DATA_DIR/rotten_tomatoes, max_length 128, batches trimmed to
their longest row).
- `profile`: torch.profiler over `--steps` training steps after a warm-up, the self CPU time of the operators
  grouped by what they belong to (dropout, linear layers, norms, attention, optimiser, ...).
- `epochs`: one cell per Table 3 row as attnbench.train runs it (phase A where the row has one, over
  `--phase-a-epochs`; one phase-B epoch with its validation pass; the test pass), all in one run: each row's epoch
  time and its ratio to softmax, and the Table 3 run (rows x 3 seeds, 10 epochs, 2.5 of phase A as paper-rt's
  steps_fraction 0.2) extrapolated from them (`--attention all`: all 18 rows).
- `compare`: the training step of a baseline tree (a git revision, exported) against the working tree, in two
  worker processes timed in alternated bursts of `--steps` steps (A B, then B A), so both see the same machine.

    python benchmarks/train_step.py profile --attention softmax --steps 20
    python benchmarks/train_step.py epochs --attention all --threads 1
    python benchmarks/train_step.py compare --baseline HEAD~3 --attention softmax performer --repeats 6

`--march x86-64-v3` builds the fused kernels (both trees' in `compare`) for AVX2 machines instead of this CPU.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import attnbench.train
from attnbench.model import ModelConfig, TransformerClassifier
from attnbench.tasks import load_task
from attnbench.train import TrainConfig, predict_proba

ATTENTIONS = {
    "performer": ("performer", {"num_features": 256}),
    "nystromformer": ("nystromformer", {"num_landmarks": 32}),
    "rfa": ("rfa", {"num_features": 64}),
    "linformer": ("linformer", {"projected_length": 64}),
    "vanilla-favor": ("random-features", {"feature_map": "favor", "num_features": 256}),
    "vanilla-trig": ("random-features", {"feature_map": "trig", "num_features": 256}),
}
PAPER_MAPS = ("favor", "elu", "softplus", "sigmoid2", "softmaxfeat", "cos2", "porf-softplus")
ATTENTIONS.update(
    {f"vanilla-{kind}": ("random-features", {"feature_map": kind, "num_features": 256}) for kind in PAPER_MAPS}
)
PHASE_A = {
    "objective": "within-class",
    "step": 2.0e-3,
    "beta": 50.0,
    "repulsion": 1.0e-3,
    "riesz_s": 0.0,
    "grad_clip": 10.0,
    "radius": 1.5,
    "radius_units": "absolute",
    "tolerance": 1.0e-6,
    "batch_size": 64,
    "epochs": 2.5,
}  # suites/paper-rt.yaml: steps_fraction 0.2 of A + B = 2.5 epochs beside 10 of phase B
PAPER_EPOCHS, SEEDS = 10, 3
# operator name fragments -> the part of the step they belong to (first match wins)
GROUPS = [
    ("optimiser", ("adam", "_foreach", "lerp", "addcdiv", "addcmul", "clip_grad", "norm_", "sqrt")),
    ("dropout", ("dropout", "bernoulli", "uniform", "attnbench_dropout", "Dropout")),
    ("attention", ("attention", "softmax", "bmm", "baddbmm", "Attention", "Landmark", "Pinv")),
    ("linear layers", ("addmm", "mm", "linear", "matmul", "Linear")),
    ("norms", ("layer_norm", "LayerNorm")),
    ("activation", ("gelu", "Gelu")),
    ("embedding", ("embedding", "Embedding", "index")),
    ("loss", ("cross_entropy", "nll", "log_softmax", "LogSoftmax", "Nll")),
]


def build(attention: str, task: Any, seed: int = 0, dropout_rng: str = "hash") -> TransformerClassifier:
    """The paper-scale classifier for `attention` (a name of ATTENTIONS or a registered attention)."""
    name, options = ATTENTIONS.get(attention, (attention, {}))
    rng = {"dropout_rng": dropout_rng} if "dropout_rng" in {f.name for f in dataclasses.fields(ModelConfig)} else {}
    cfg = ModelConfig(
        vocab_size=task.vocab_size,
        num_classes=task.num_classes,
        max_length=task.max_length,
        d_model=128,
        num_layers=2,
        num_heads=2,
        ffn_dim=256,
        dropout=0.1,
        **rng,
    )
    return TransformerClassifier(cfg, name, options, seed=seed)


def steps(model: nn.Module, task: Any, count: int | None, seed: int = 0) -> int:
    """`count` training steps (None: one epoch) as attnbench.train takes them; returns the steps taken."""
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    make = getattr(attnbench.train, "make_optimizer", None)  # a baseline tree may predate it
    optimizer = make(trainable, TrainConfig()) if make else torch.optim.AdamW(trainable, lr=2e-4, weight_decay=0.01)
    generator = torch.Generator().manual_seed(seed)
    taken = 0
    for ids, mask, seg, labels in task["train"].batches(64, shuffle=True, generator=generator):
        loss = nn.functional.cross_entropy(model(ids, mask, seg), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        loss.item()
        taken += 1
        if count is not None and taken >= count:
            break
    return taken


def group_of(name: str) -> str:
    for group, fragments in GROUPS:
        if any(f.lower() in name.lower() for f in fragments):
            return group
    return "other"


def profile(attention: str, task: Any, count: int, dropout_rng: str) -> None:
    model = build(attention, task, dropout_rng=dropout_rng)
    steps(model, task, 3)
    start = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        steps(model, task, count)
    wall = (time.perf_counter() - start) / count * 1e3
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    groups: dict[str, float] = collections.Counter()
    for e in events:
        groups[group_of(e.key)] += e.self_cpu_time_total
    print(
        f"{attention} (dropout_rng {dropout_rng}): {wall:.1f} ms per step under the profiler ({count} steps, {torch.get_num_threads()} "
        f"threads); self CPU time of the operators by part:"
    )
    for group, us in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {group:14s} {us / count / 1e3:7.2f} ms  {100 * us / total:5.1f}%")
    print("top operators (self CPU per step):")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:15]:
        print(f"  {e.key[:48]:48s} {e.self_cpu_time_total / count / 1e3:7.2f} ms  x{e.count // count}")


def table3_rows() -> dict[str, tuple[str, dict, dict]]:
    """The 18 rows of the paper's Table 3: label -> (attention, options, model overrides), as suites/paper.yaml."""
    rows = {
        "softmax": ("softmax", {}, {}),
        "vanilla-favor-untied": ("random-features", {"feature_map": "favor", "num_features": 256}, {"tie_qk": False}),
        "performer": ("performer", {"num_features": 256}, {}),
        "linformer": ("linformer", {"projected_length": 64}, {}),
    }
    for kind, name in (("vanilla", "random-features"), ("kernel", "coulomb")):
        for feature_map in PAPER_MAPS:
            rows[f"{kind}-{feature_map}"] = (name, {"feature_map": feature_map, "num_features": 256}, {})
    return rows


def cell_seconds(label: str, row: tuple[str, dict, dict], task: Any, phase_a_epochs: float) -> dict[str, float]:
    """One cell as attnbench.train runs it, at one phase-B epoch and `phase_a_epochs` of phase A: seconds of phase
    A, of the epoch (training and the validation pass) and of the test pass."""
    name, options, overrides = row
    cfg = ModelConfig(
        vocab_size=task.vocab_size,
        num_classes=task.num_classes,
        max_length=task.max_length,
        d_model=128,
        num_layers=2,
        num_heads=2,
        ffn_dim=256,
        dropout=0.1,
        **overrides,
    )
    model = TransformerClassifier(cfg, name, options, seed=0)
    train = TrainConfig(epochs=1, phase_a={**PHASE_A, "epochs": phase_a_epochs})
    start = time.perf_counter()
    result = attnbench.train.train_classifier(model, task, train, seed=0)
    total = time.perf_counter() - start
    test_start = time.perf_counter()
    predict_proba(result.model, task["test"], 256)
    phase_a = result.phase_a["seconds"] if result.phase_a else 0.0
    return {"phase_a": phase_a, "epoch": total - phase_a, "test": time.perf_counter() - test_start}


def epochs(labels: list[str], task: Any, phase_a_epochs: float) -> None:
    """Per Table 3 row: a cell's phase A, one epoch and the test pass, then the extrapolated Table 3 wall time."""
    rows = table3_rows()
    unknown = sorted(set(labels) - set(rows) - {"all"})
    if unknown:
        raise SystemExit(f"unknown rows {unknown}; rows are {sorted(rows)} or 'all'")
    chosen = ["softmax"] + [label for label in (list(rows) if "all" in labels else labels) if label != "softmax"]
    scale_a = PHASE_A["epochs"] / phase_a_epochs
    print(
        f"one cell per row: phase A over {phase_a_epochs} epochs (scaled to {PHASE_A['epochs']}), one phase-B "
        f"epoch ({math.ceil(len(task['train']) / 64)} steps of 64 and the validation pass) and the test pass; "
        f"{torch.get_num_threads()} threads"
    )
    print(
        f"| row | epoch s | epoch x softmax | phase A s ({PHASE_A['epochs']:g} epochs) | cell s (10 epochs) | "
        f"load average |"
    )
    print("| --- | --- | --- | --- | --- | --- |", flush=True)
    total, reference, cells = 0.0, math.nan, []
    for label in chosen:
        t = cell_seconds(label, rows[label], task, phase_a_epochs)
        reference = t["epoch"] if label == "softmax" else reference
        cell = t["phase_a"] * scale_a + PAPER_EPOCHS * t["epoch"] + t["test"]
        total += cell
        cells += [cell] * SEEDS
        print(
            f"| {label} | {t['epoch']:.1f} | {t['epoch'] / reference:.2f} | {t['phase_a'] * scale_a:.1f} | "
            f"{cell:.0f} | {os.getloadavg()[0]:.1f} |",
            flush=True,
        )
    workers = [0.0] * max(1, os.cpu_count() or 1)
    for cell in sorted(cells, reverse=True):  # longest first, each to the worker that is free first
        workers[workers.index(min(workers))] += cell
    print(
        f"these {len(chosen)} rows x {SEEDS} seeds, one after another: {total * SEEDS / 3600:.2f} h; on "
        f"{len(workers)} one-thread workers: {max(workers) / 3600:.2f} h (extrapolated: phase A linear in its "
        f"epochs, phase B in its epochs; the workers as fast as this one alone)"
    )


def worker(attentions: list[str], task: Any) -> None:
    """Serve 'attention steps' lines on stdin: time that many training steps, answer the ms per step (JSON)."""
    models = {a: build(a, task) for a in attentions}
    for model in models.values():
        steps(model, task, 2)
    print("ready", flush=True)
    for line in sys.stdin:
        attention, count = line.split()
        start = time.perf_counter()
        taken = steps(models[attention], task, int(count))
        print(json.dumps((time.perf_counter() - start) / taken * 1e3), flush=True)


def build_kernels_for(march: str) -> None:
    """Build the fused kernels with -march=`march` in place of -march=native (before their first use)."""
    from attnbench.kernels import native

    native.FLAGS = tuple(f"-march={march}" if f == "-march=native" else f for f in native.FLAGS)


def compare(
    baseline: str,
    attentions: list[str],
    count: int,
    repeats: int,
    threads: int,
    max_length: int,
    march: str | None = None,
) -> None:
    from benchmarks.contention import export_tree

    root = Path(__file__).resolve().parents[1]
    times: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"old": export_tree(baseline, Path(tmp)), "new": root}
        workers = {}
        for build_name, tree in trees.items():
            argv = [
                sys.executable,
                str(Path(__file__).resolve()),
                "worker",
                "--attention",
                *attentions,
                "--threads",
                str(threads),
                "--max-length",
                str(max_length),
            ]
            argv += ["--march", march] if march else []
            workers[build_name] = subprocess.Popen(
                argv,
                cwd=tree,
                env=dict(os.environ, PYTHONPATH=str(tree)),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            if workers[build_name].stdout.readline().strip() != "ready":
                raise RuntimeError(f"the {build_name} worker did not start")
        try:
            for r in range(repeats):
                for attention in attentions:
                    for build_name in ("old", "new") if r % 2 == 0 else ("new", "old"):
                        proc = workers[build_name]
                        proc.stdin.write(f"{attention} {count}\n")
                        proc.stdin.flush()
                        times[(build_name, attention)].append(json.loads(proc.stdout.readline()))
        finally:
            for proc in workers.values():
                proc.stdin.close()
                proc.wait()
    kernels = f"kernels built for -march={march}" if march else "kernels built for this CPU"
    print(
        f"training step (batch 64, Rotten Tomatoes, {threads} threads, {kernels}), {baseline} (old) against the "
        f"working tree (new): median ms per step over {repeats} alternated bursts of {count} steps; load average "
        f"{os.getloadavg()[0]:.1f} at the end"
    )
    print("| attention | old ms | new ms | new / old |")
    print("| --- | --- | --- | --- |")
    for attention in attentions:
        old, new = (float(np.median(times[(b, attention)])) for b in ("old", "new"))
        print(f"| {attention} | {old:.1f} | {new:.1f} | {new / old:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["profile", "epochs", "compare", "worker"])
    parser.add_argument("--baseline", default="HEAD", help="compare: git revision of the old tree")
    parser.add_argument("--attention", nargs="+", default=["softmax"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=1, help="compare: alternated bursts per build")
    parser.add_argument("--phase-a-epochs", type=float, default=0.25, help="epochs: phase A measured over this many")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--dropout-rng", choices=["hash", "torch"], default="hash", help="ModelConfig.dropout_rng")
    parser.add_argument(
        "--march",
        help="build the fused kernels for this -march (x86-64-v3: AVX2 machines) instead "
        "of -march=native; in compare, both trees'",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.what == "compare":
        compare(args.baseline, args.attention, args.steps, args.repeats, args.threads, args.max_length, args.march)
        return
    if args.march:
        build_kernels_for(args.march)
    task = load_task("rotten_tomatoes", max_length=args.max_length)
    if args.what == "worker":
        worker(args.attention, task)
    elif args.what == "profile":
        for attention in args.attention:
            profile(attention, task, args.steps, args.dropout_rng)
    else:
        epochs(args.attention, task, args.phase_a_epochs)


if __name__ == "__main__":
    main()
