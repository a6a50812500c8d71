"""Phase A of two-phase training: align the Coulomb particles of every attention layer and head.

Everything but the particles is frozen: the model runs in evaluation mode under no_grad, forward
pre-hooks on the attention modules capture the inputs of each head's feature map, and each
(layer, head) particle system takes one Langevin step per batch (`baselines.coulomb.particle_step`)
on those inputs against the sequence labels. Each step is one forward pass of the model up to the
last attention (inputs of later layers reflect the earlier layers' current particles) plus
O(n M + M^2 d) work per head.

Representations (PAPER.md, **our default**): the inputs to each head's feature map, mean-pooled over
the real tokens of each sequence; option `pooling: token` uses every real token with its sequence's
label. With tied Q = K the inputs are the queries; with untied projections the pooled queries and
pooled keys are stacked (2n examples, each with its sequence label), since the kernel acts on both.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Literal

import torch
from torch import Tensor, nn

from baselines.coulomb import DynamicsConfig, kernel_target_alignment, particle_step, resample_particles
from harness.errors import ConfigError
from harness.options import make_options, option, require
from harness.tasks.base import Split
from harness.train import Progress

DISTANCE_SAMPLES = 2000  # pairwise distances kept (before and after) for histograms


@dataclasses.dataclass
class PhaseAConfig(DynamicsConfig):
    """Phase-A budget and data on top of the particle dynamics (paper: about 2 epochs)."""

    epochs: float = option(2.0, "passes over the training data (paper: about 2)")
    max_steps: int | None = option(None, "step budget; None = epochs x batches per epoch")
    batch_size: int = option(64, "sequences per Langevin step")
    pooling: Literal["mean", "token"] = option(
        "mean", "representations aligned: mean over real tokens per sequence (ours), or every real token")
    probe_examples: int = option(512, "training rows on which alignment before/after is measured")
    resample: int | None = option(None, "keep D particles per head drawn from the final configuration (None = all)")
    resample_weights: Literal["gibbs", "uniform"] = option(
        "gibbs", "resampling law: Gibbs weights exp(-beta U_k) of each particle's potential, or uniform")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.epochs > 0, f"phase_a epochs={self.epochs} must be positive")
        require(self.max_steps is None or self.max_steps >= 1, f"phase_a max_steps={self.max_steps} must be >= 1")
        require(self.batch_size >= 2, f"phase_a batch_size={self.batch_size} must be at least 2 (alignment pairs)")
        require(self.probe_examples >= 2, f"phase_a probe_examples={self.probe_examples} must be at least 2")


def particle_modules(model: nn.Module) -> list[nn.Module]:
    """Attention modules whose particles phase A moves (they have learning_phase_parameters and kernel_features)."""
    found = []
    for module in model.modules():
        if module is model or not callable(getattr(module, "learning_phase_parameters", None)):
            continue
        if not callable(getattr(getattr(module, "feature_map", None), "kernel_features", None)):
            raise ConfigError(f"{type(module).__name__} has learning_phase_parameters but no "
                              f"feature_map.kernel_features, so phase A cannot align it; give it a Coulomb feature map")
        found.append(module)
    return found


class _AllCaptured(Exception):
    """Raised by the last capture hook of a pass: the rest of the forward pass is not needed."""


class _Capture:
    """Forward pre-hooks that keep (q, k, key_padding_mask) of each attention module in one pass.

    Once every module's inputs are in, the pass is cut short (the layers after the last attention
    and the classifier do not affect the particles), which saves about half a forward for 2 layers.
    """

    def __init__(self, modules: list[nn.Module]):
        self.inputs: list[tuple[Tensor, Tensor, Tensor | None] | None] = [None] * len(modules)
        self.pending: set[int] = set()
        self.handles = [m.register_forward_pre_hook(self._hook(i), with_kwargs=True) for i, m in enumerate(modules)]

    def _hook(self, index: int):
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            q, k = args[0], args[1] if len(args) > 1 else kwargs["k"]
            mask = kwargs.get("key_padding_mask", args[3] if len(args) > 3 else None)
            self.inputs[index] = (q, k, mask)
            self.pending.discard(index)
            if not self.pending:
                raise _AllCaptured
        return hook

    def run(self, model: nn.Module, batch: tuple, device: torch.device) -> Tensor:
        """Forward `batch` (ids, mask, segments, labels) until every module's inputs are captured -> labels."""
        ids, mask, seg, labels = (None if t is None else t.to(device) for t in batch)
        self.pending = set(range(len(self.inputs)))
        try:
            model(ids, mask, seg)
        except _AllCaptured:
            pass
        if self.pending:
            raise RuntimeError(f"phase A: attention modules {sorted(self.pending)} were not called by the model's forward")
        return labels

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def representations(q: Tensor, k: Tensor, mask: Tensor | None, labels: Tensor,
                    pooling: str) -> tuple[Tensor, Tensor]:
    """Feature-map inputs to align: q, k (B, H, N, d), mask (B, N) -> x (1, H, n, d) and labels (n,)."""
    b, _, n, _ = q.shape
    mask = torch.ones(b, n, dtype=torch.bool, device=q.device) if mask is None else mask
    sources = [q] if k is q else [q, k]
    if pooling == "mean":
        weights = mask.to(q.dtype)[:, None, :, None]
        pooled = [(x * weights).sum(2) / weights.sum(2).clamp_min(1.0) for x in sources]  # (B, H, d)
        xs = torch.cat(pooled, dim=0).transpose(0, 1)
        ys = labels.repeat(len(sources))
    else:
        xs = torch.cat([x.transpose(0, 1)[:, mask] for x in sources], dim=1)  # (H, tokens, d)
        ys = labels[:, None].expand(b, n)[mask].repeat(len(sources))
    return xs.unsqueeze(0), ys


def _probe_alignment(model: nn.Module, modules: list[nn.Module], capture: _Capture, probe: Split,
                     cfg: PhaseAConfig, device: torch.device, num_classes: int) -> list[list[float]]:
    """Alignment per layer and head on the whole probe split (one batch of representations)."""
    xs: list[list[Tensor]] = [[] for _ in modules]
    ys: list[list[Tensor]] = [[] for _ in modules]
    for batch in probe.batches(cfg.batch_size):
        labels = capture.run(model, batch, device)
        for i, (q, k, mask) in enumerate(capture.inputs):
            x, y = representations(q, k, mask, labels, cfg.pooling)
            xs[i].append(x)
            ys[i].append(y)
    result = []
    for module, x, y in zip(modules, xs, ys):
        phi = module.feature_map.kernel_features(torch.cat(x, dim=2))[0]  # (H, n, k*M)
        labels = torch.cat(y)
        result.append([float(kernel_target_alignment(p, labels, cfg.alignment, num_classes=num_classes))
                       for p in phi])
    return result


def _distance_sample(modules: list[nn.Module], generator: torch.Generator) -> list[float]:
    """Up to DISTANCE_SAMPLES pairwise particle distances pooled over layers and heads."""
    distances = torch.cat([torch.pdist(omega).cpu() for m in modules
                           for omega in m.learning_phase_parameters()[0].detach()])
    index = torch.randperm(distances.numel(), generator=generator)[:DISTANCE_SAMPLES]
    return distances[index].tolist()


def _mean(table: list[list[float]]) -> float:
    values = [v for row in table for v in row]
    return sum(values) / len(values)


def _resample(modules: list[nn.Module], last: list[tuple[Tensor, Tensor]], cfg: PhaseAConfig,
              generator: torch.Generator, num_classes: int) -> None:
    """Replace each head's particles by cfg.resample drawn from its final configuration (potentials on the last batch)."""
    for module, (x, y) in zip(modules, last):
        omega = module.learning_phase_parameters()[0].detach()
        phi = module.feature_map.kernel_features(x, omega)[0]
        kept = [resample_particles(omega[h], phi[h], y, cfg.resample, cfg, weights=cfg.resample_weights,
                                   generator=generator, num_classes=num_classes) for h in range(omega.shape[0])]
        module.feature_map.set_particles(torch.stack(kept))


def _json_config(cfg: PhaseAConfig) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in dataclasses.asdict(cfg).items()}


def run_learning_phase(model: nn.Module, train_split: Split, options: dict, *, device: torch.device | str = "cpu",
                       seed: int = 0, progress: Progress | None = None) -> dict[str, Any]:
    """Phase A: move every attention's particles, nothing else; returns budget, time and diagnostics (JSON-able)."""
    cfg = make_options(PhaseAConfig, options or {}, what="phase_a")
    device = torch.device(device)
    modules = particle_modules(model)
    if not modules:
        raise ConfigError("phase A found no attention with particles (learning_phase_parameters); "
                          "use an attention such as 'coulomb' or drop phase_a")
    smallest = min(m.learning_phase_parameters()[0].shape[1] for m in modules)
    if cfg.resample is not None and not 1 <= cfg.resample <= smallest:
        raise ConfigError(f"phase_a resample={cfg.resample} must lie in [1, {smallest}] (particles per head)")
    if len(train_split) < 2:
        raise ConfigError(f"phase A needs at least 2 training sequences to align pairs, got {len(train_split)}")
    num_classes = max(2, int(train_split.labels.max()) + 1)
    steps_per_epoch = math.ceil(len(train_split) / cfg.batch_size)
    budget = cfg.max_steps if cfg.max_steps is not None else max(1, math.ceil(cfg.epochs * steps_per_epoch))
    generator = torch.Generator().manual_seed(seed)
    probe = train_split.subset(slice(0, cfg.probe_examples))
    was_training = model.training
    model.eval()
    capture = _Capture(modules)
    start = time.perf_counter()
    try:
        with torch.no_grad():
            before = _probe_alignment(model, modules, capture, probe, cfg, device, num_classes)
        distances_before = _distance_sample(modules, generator)
        diagnostics, last, steps, stopped = _run_dynamics(model, modules, capture, train_split, cfg, budget,
                                                          generator, device, num_classes, progress)
        if cfg.resample is not None:
            _resample(modules, last, cfg, generator, num_classes)
        with torch.no_grad():
            after = _probe_alignment(model, modules, capture, probe, cfg, device, num_classes)
    finally:
        capture.remove()
        model.train(was_training)
    return {"seconds": time.perf_counter() - start, "steps": steps, "budget_steps": budget,
            "stopped_early": stopped, "examples_per_step": cfg.batch_size,
            "num_particles": [int(m.learning_phase_parameters()[0].shape[1]) for m in modules],
            "alignment_kind": cfg.alignment, "pooling": cfg.pooling,
            "alignment_before": _mean(before), "alignment_after": _mean(after),
            "alignment_before_per_head": before, "alignment_after_per_head": after,
            "diagnostics": diagnostics, "distances_before": distances_before,
            "distances_after": _distance_sample(modules, generator), "config": _json_config(cfg)}


def _run_dynamics(model: nn.Module, modules: list[nn.Module], capture: _Capture, train: Split, cfg: PhaseAConfig,
                  budget: int, generator: torch.Generator, device: torch.device, num_classes: int,
                  progress: Progress | None) -> tuple[list, list[tuple[Tensor, Tensor]], int, bool]:
    """The phase-A loop: one forward pass and one particle step per head per batch, until budget or rest."""
    params = [m.learning_phase_parameters()[0] for m in modules]
    active = [torch.ones(p.shape[0], dtype=torch.bool) for p in params]
    diagnostics: list[list[list[dict[str, float]]]] = [[[] for _ in range(p.shape[0])] for p in params]
    last: list[tuple[Tensor, Tensor]] = []
    steps = 0
    while steps < budget and any(a.any() for a in active):
        for batch in train.batches(cfg.batch_size, shuffle=True, generator=generator):
            if len(batch[3]) < 2:
                continue  # a last batch of one sequence has no pairs to align
            with torch.no_grad():
                labels = capture.run(model, batch, device)
            last = []
            for i, (module, param) in enumerate(zip(modules, params)):
                q, k, mask = capture.inputs[i]
                x, y = representations(q, k, mask, labels, cfg.pooling)
                last.append((x, y))
                if not active[i].any():
                    continue

                def features(w: Tensor, feature_map: nn.Module = module.feature_map, x: Tensor = x) -> Tensor:
                    return feature_map.kernel_features(x, w)[0]  # (H, n, k*M)

                new, rows = particle_step(param.detach(), features, y, cfg, generator=generator,
                                          num_classes=num_classes, active=active[i])
                with torch.no_grad():
                    param.copy_(new)
                for h, row in enumerate(rows):
                    if active[i][h]:
                        diagnostics[i][h].append(row)
                active[i] &= torch.tensor([row["max_move"] >= cfg.tolerance for row in rows])
            steps += 1
            if progress is not None:
                progress("phase A", steps, budget)
            if steps >= budget or not any(a.any() for a in active):
                break
    return diagnostics, last, steps, not any(a.any() for a in active)
