"""Phase A of two-phase training: align the Coulomb particles of every attention layer and head.

The procedure `coulomb` names in the registry (`Capabilities.learning_phase`); the training loop runs it
without knowing what it does. Everything but the particles is frozen (LayerNorm and value projections too,
unless `train_norm_value`): the model runs in evaluation mode, forward hooks on the attention modules
capture their inputs (q, k, key_padding_mask) and outputs, and each (layer, head) particle system takes one
projected Langevin step per batch (`DynamicsConfig.move`) on H = -V + lambda W_s.

Objectives V (docs/paper.md "In attention: what phase A aligns"):
- within-class (default, eq. C.4): `within_class_alignment` of each attention layer's attention outputs
  (heads concatenated, before the output projection), mean-pooled over real tokens, with gradients through
  the attention into the particles; each layer's particles follow the gradient of its own layer's H, the
  layers below at their current particles (**our default**: the paper does not say which layer);
- centered-kta (Appendix D): centred kernel-target alignment of the same pooled outputs;
- input-kernel (eq. 2.2, the earlier objective): the `kernel_target_alignment` (option `alignment`) of the
  feature-map kernel on the pooled feature-map inputs, one head at a time (`particle_step`);
- `pooling: token` (eq. C.5) aligns every real token with its sequence's label instead of the pooled rows.

Every result carries what shows a random walk: per step, the median over particles of the drift
|eta N grad H| and of the noise |sqrt(2 eta / beta) xi| and their ratio; the three alignments on held-out
validation rows before and after; particle norms before and after the projection; the relative move; and
what the pooled attention outputs carry of the labels before and after (`representation_probes`: a linear
probe fitted on training rows and scored on the held-out ones, the outputs' norm, the class means' distance).

Options beyond the paper's (each default is the paper's): `force` (DynamicsConfig: the text's averages or
sums over pairs), `beta` = inf (no noise), `step`, `after_epochs` (phase A after k epochs of phase B, then
frozen), and, per attention, `coulomb`'s own `phase_a` options laid over the suite's.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Any, Literal

import torch
from torch import Tensor, nn

from attnbench.attention_capture import AttentionCapture
from attnbench.baselines.coulomb.physics import (
    DynamicsConfig,
    kernel_target_alignment,
    particle_step,
    resample_index,
    within_class_alignment,
)
from attnbench.errors import ConfigError
from attnbench.options import option, require
from attnbench.progress import Progress
from attnbench.registry import learning_phase_config, register_learning_phase
from attnbench.tasks.base import Split
from attnbench.train import learning_phase_steps

DISTANCE_SAMPLES = 2000  # pairwise distances kept (before and after) for histograms
ALIGNMENTS = ("within-class", "centered-kta", "input-kernel")  # measured before and after on validation rows


@dataclasses.dataclass
class PhaseAConfig(DynamicsConfig):
    """Phase-A objective, budget and data on top of the particle dynamics."""

    objective: Literal["within-class", "centered-kta", "input-kernel"] = option(
        "within-class",
        "V: within-class alignment of pooled attention outputs (eq. C.4, paper), centred KTA of "
        "them (App. D), or the feature-map kernel's alignment on pooled inputs (eq. 2.2, the earlier objective)",
    )
    pooling: Literal["mean", "token"] = option(
        "mean", "rows aligned: mean over real tokens per sequence (C.4), or every real token (C.5)"
    )
    epochs: float = option(10.0, "passes over the training data at most, with the early stop (App. F: 10)")
    steps_fraction: float | None = option(
        None, "instead: phase A takes this fraction of all training steps, A + B (Sec. 5: 0.2)"
    )
    max_steps: int | None = option(None, "step budget overriding epochs and steps_fraction")
    batch_size: int = option(64, "sequences per Langevin step")
    train_norm_value: bool = option(
        False,
        "also train LayerNorm and value-projection parameters on H (gradient steps of size `step`, no "
        "noise; ours); default: particles only",
    )
    probe_examples: int = option(512, "validation rows on which the alignments before/after are measured")
    resample: int | None = option(None, "keep D particles per head drawn from the final configuration (None = all)")
    resample_weights: Literal["gibbs", "uniform"] = option(
        "gibbs", "resampling law: Gibbs weights exp(-beta U_k) of each particle's eq. 2.2 potential, or uniform"
    )
    after_epochs: int = option(
        0,
        "when phase A runs: 0 = at initialisation, before any phase-B step (paper); k = after k epochs of phase B, "
        "the particles then frozen for the rest (ours: aligns a trained network rather than a random one)",
        minimum=0,
        maximum=100_000,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.epochs > 0, f"phase_a epochs={self.epochs} must be positive")
        require(
            self.steps_fraction is None or 0 < self.steps_fraction < 1,
            f"phase_a steps_fraction={self.steps_fraction} must lie in (0, 1)",
        )
        require(self.max_steps is None or self.max_steps >= 1, f"phase_a max_steps={self.max_steps} must be >= 1")
        require(self.batch_size >= 2, f"phase_a batch_size={self.batch_size} must be at least 2 (alignment pairs)")
        require(self.probe_examples >= 2, f"phase_a probe_examples={self.probe_examples} must be at least 2")
        require(
            not (self.train_norm_value and self.objective == "input-kernel"),
            "phase_a train_norm_value needs an output objective (within-class or centered-kta); the "
            "input-kernel objective sees no value projection",
        )

    def budget(self, train_rows: int, phase_b_steps: int | None) -> int:
        """Phase-A steps: max_steps, else the steps_fraction of A + B, else epochs x batches per epoch."""
        return learning_phase_steps(self, train_rows, phase_b_steps)


def particle_modules(model: nn.Module) -> list[nn.Module]:
    """Attention modules whose particles phase A moves (they have learning_phase_parameters and kernel_features)."""
    found = []
    for module in model.modules():
        if module is model or not callable(getattr(module, "learning_phase_parameters", None)):
            continue
        if not callable(getattr(getattr(module, "feature_map", None), "kernel_features", None)):
            raise ConfigError(
                f"{type(module).__name__} has learning_phase_parameters but no feature_map.kernel_features, so "
                f"phase A cannot align it; give it a random-feature map (attnbench.baselines.feature_maps)"
            )
        found.append(module)
    return found


def norm_value_parameters(model: nn.Module) -> list[nn.Parameter]:
    """LayerNorm and value-projection (`v_proj`) parameters: what `train_norm_value` lets phase A move."""
    return [
        p
        for name, module in model.named_modules()
        if isinstance(module, nn.LayerNorm) or name.rsplit(".", 1)[-1] == "v_proj"
        for p in module.parameters()
    ]


def _real_tokens(mask: Tensor | None, b: int, n: int, device: torch.device) -> Tensor:
    return torch.ones(b, n, dtype=torch.bool, device=device) if mask is None else mask


def pooled_outputs(out: Tensor, mask: Tensor | None, labels: Tensor, pooling: str) -> tuple[Tensor, Tensor]:
    """Attention outputs (B, H, N, D), heads concatenated -> rows (B, H*D) mean-pooled over real tokens, or every
    real token (T, H*D) with its sequence's label; and the rows' labels."""
    b, h, n, d = out.shape
    mask = _real_tokens(mask, b, n, out.device)
    rows = out.transpose(1, 2).reshape(b, n, h * d)
    if pooling == "token":
        return rows[mask], labels[:, None].expand(b, n)[mask]
    weights = mask.to(out.dtype)[..., None]
    return (rows * weights).sum(1) / weights.sum(1).clamp_min(1.0), labels


def representations(q: Tensor, k: Tensor, mask: Tensor | None, labels: Tensor, pooling: str) -> tuple[Tensor, Tensor]:
    """Feature-map inputs (eq. 2.2): q, k (B, H, N, d), mask (B, N) -> x (1, H, n, d) and labels (n,).

    With tied Q = K the inputs are the queries; with untied projections the pooled queries and pooled keys are
    stacked (2n examples, each with its sequence label), since the kernel acts on both."""
    b, _, n, _ = q.shape
    mask = _real_tokens(mask, b, n, q.device)
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


def output_alignment(kind: str, rows: Tensor, labels: Tensor, num_classes: int) -> Tensor:
    """V of pooled outputs rows (n, D): within-class (eq. C.4) or centered-kta (App. D) -> scalar."""
    if kind == "within-class":
        return within_class_alignment(rows, labels)
    return kernel_target_alignment(rows, labels, "centered", num_classes=num_classes)


def _probe_alignments(
    model: nn.Module,
    modules: list[nn.Module],
    capture: AttentionCapture,
    probe: Split,
    cfg: PhaseAConfig,
    device: torch.device,
    num_classes: int,
) -> dict[str, list[float]]:
    """Each of ALIGNMENTS per layer on the probe rows (mean over heads for input-kernel), without gradients."""
    rows: list[list[Tensor]] = [[] for _ in modules]
    xs: list[list[Tensor]] = [[] for _ in modules]
    ys: list[list[Tensor]] = [[] for _ in modules]
    xys: list[list[Tensor]] = [[] for _ in modules]
    with torch.no_grad():
        for batch in probe.batches(cfg.batch_size):
            labels = capture.run(model, batch, device)
            for i, ((q, k, mask), out) in enumerate(zip(capture.inputs, capture.outputs)):
                pooled, y = pooled_outputs(out, mask, labels, cfg.pooling)
                x, xy = representations(q, k, mask, labels, cfg.pooling)
                rows[i].append(pooled.double())
                ys[i].append(y)
                xs[i].append(x)
                xys[i].append(xy)
        result: dict[str, list[float]] = {kind: [] for kind in ALIGNMENTS}
        for module, r, y, x, xy in zip(modules, rows, ys, xs, xys):
            r, y = torch.cat(r), torch.cat(y)
            for kind in ALIGNMENTS[:2]:
                result[kind].append(float(output_alignment(kind, r, y, num_classes)))
            phi = module.feature_map.kernel_features(torch.cat(x, dim=2))[0]  # (H, n, k*M)
            labels = torch.cat(xy)
            heads = [
                float(kernel_target_alignment(p.double(), labels, cfg.alignment, num_classes=num_classes)) for p in phi
            ]
            result["input-kernel"].append(sum(heads) / len(heads))
    return result


def _pooled_rows(
    model: nn.Module, capture: AttentionCapture, split: Split, cfg: PhaseAConfig, device: torch.device
) -> list[tuple[Tensor, Tensor]]:
    """Each attention layer's mean-pooled outputs of `split`'s rows (n, H*D) float64 and their labels (n,)."""
    rows: list[list[Tensor]] = [[] for _ in capture.outputs]
    ys: list[Tensor] = []
    with torch.no_grad():
        for batch in split.batches(cfg.batch_size):
            labels = capture.run(model, batch, device)
            ys.append(labels.cpu())
            for i, ((_, _, mask), out) in enumerate(zip(capture.inputs, capture.outputs)):
                rows[i].append(pooled_outputs(out, mask, labels, "mean")[0].double().cpu())
    labels = torch.cat(ys)
    return [(torch.cat(r), labels) for r in rows]


def representation_probes(
    model: nn.Module, capture: AttentionCapture, fit: Split, score: Split, cfg: PhaseAConfig, device: torch.device
) -> dict[str, list[float]]:
    """Per attention layer, what the pooled outputs carry of the labels: a logistic-regression probe fitted on
    `fit`'s rows and scored on `score`'s (accuracy), and on `score`'s rows the mean norm of the pooled outputs
    and the distance between the class means (the largest over pairs of classes)."""
    from sklearn.linear_model import LogisticRegression  # here: every attnbench command would pay its import

    out: dict[str, list[float]] = {"probe_accuracy": [], "pooled_norm": [], "class_separation": []}
    for (x_fit, y_fit), (x, y) in zip(
        _pooled_rows(model, capture, fit, cfg, device), _pooled_rows(model, capture, score, cfg, device)
    ):
        scale = x_fit.std(dim=0).clamp_min(1e-12)
        if y_fit.unique().numel() >= 2:
            probe = LogisticRegression(max_iter=2000).fit((x_fit / scale).numpy(), y_fit.numpy())
            out["probe_accuracy"].append(float(probe.score((x / scale).numpy(), y.numpy())))
        else:
            out["probe_accuracy"].append(math.nan)
        means = torch.stack([x[y == c].mean(dim=0) for c in y.unique()])
        out["pooled_norm"].append(float(x.norm(dim=1).mean()))
        out["class_separation"].append(float(torch.cdist(means, means).max()))
    return out


def _distance_sample(modules: list[nn.Module], generator: torch.Generator) -> list[float]:
    """Up to DISTANCE_SAMPLES pairwise particle distances pooled over layers and heads."""
    distances = torch.cat(
        [torch.pdist(omega).cpu() for m in modules for omega in m.learning_phase_parameters()[0].detach()]
    )
    index = torch.randperm(distances.numel(), generator=generator)[:DISTANCE_SAMPLES]
    return distances[index].tolist()


def _resample(
    modules: list[nn.Module],
    last: list[tuple[Tensor, Tensor]],
    cfg: PhaseAConfig,
    generator: torch.Generator,
    num_classes: int,
) -> None:
    """Replace each head's particles (and cos2's phases) by cfg.resample drawn from its final configuration,
    with eq. 2.2 potentials on the last batch's inputs."""
    for module, (x, y) in zip(modules, last):
        fmap = module.feature_map
        omega = module.learning_phase_parameters()[0].detach()
        phi = fmap.kernel_features(x, omega)[0]
        index = torch.stack(
            [
                resample_index(
                    omega[h],
                    phi[h],
                    y,
                    cfg.resample,
                    cfg,
                    weights=cfg.resample_weights,
                    generator=generator,
                    num_classes=num_classes,
                )
                for h in range(omega.shape[0])
            ]
        )  # (H, D)
        phase = None if getattr(fmap, "phase", None) is None else torch.gather(fmap.phase, 1, index)
        fmap.replace_omegas(torch.stack([omega[h, index[h]] for h in range(omega.shape[0])]), phase)


def _json_config(cfg: PhaseAConfig) -> dict[str, Any]:
    return {
        k: (str(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in dataclasses.asdict(cfg).items()
    }


def _median(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def walk_summary(diagnostics: list[list[list[dict[str, float]]]]) -> dict[str, Any]:
    """Medians over steps, layers and heads of the per-step move statistics; drift / noise below 1 is a walk."""
    rows = [row for layer in diagnostics for head in layer for row in head]
    summary = {
        key: _median([row[key] for row in rows if key in row])
        for key in ("drift", "noise", "norm_before_projection", "norm_after_projection", "projected_fraction")
    }
    summary["drift_noise_ratio"] = (
        summary["drift"] / summary["noise"]
        if summary["noise"] > 0
        else (math.inf if summary["drift"] > 0 else math.nan)
    )
    summary["drift_below_noise"] = bool(summary["drift_noise_ratio"] < 1)
    first = [head[0] for layer in diagnostics for head in layer if head]
    summary["first_step_norm_before_projection"] = _median([row["norm_before_projection"] for row in first])
    summary["first_step_norm_after_projection"] = _median([row["norm_after_projection"] for row in first])
    return summary


@register_learning_phase("coulomb-phase-a", config=PhaseAConfig)
def run_learning_phase(
    model: nn.Module,
    train_split: Split,
    options: PhaseAConfig | dict[str, Any],
    *,
    device: torch.device | str = "cpu",
    seed: int = 0,
    progress: Progress | None = None,
    validation: Split | None = None,
    phase_b_steps: int | None = None,
) -> dict[str, Any]:
    """Phase A: move every attention's particles (and, by option, LayerNorm and value projections), nothing else;
    returns budget, time, alignments on `validation` (else the first training rows) and walk diagnostics.
    Long: the phase's steps in order (budget, alignments before, the Langevin walk with its early stop,
    alignments after, the record), which share the walk's state."""
    cfg = learning_phase_config(PhaseAConfig, options, "phase_a")
    device = torch.device(device)
    modules = particle_modules(model)
    if not modules:
        raise ConfigError(
            "phase A found no attention with particles (learning_phase_parameters); "
            "use an attention such as 'coulomb' or drop phase_a"
        )
    smallest = min(m.learning_phase_parameters()[0].shape[1] for m in modules)
    if cfg.resample is not None and not 1 <= cfg.resample <= smallest:
        raise ConfigError(f"phase_a resample={cfg.resample} must lie in [1, {smallest}] (particles per head)")
    if len(train_split) < 2:
        raise ConfigError(f"phase A needs at least 2 training sequences to align pairs, got {len(train_split)}")
    num_classes = max(2, int(train_split.labels.max()) + 1)
    budget = cfg.budget(len(train_split), phase_b_steps)
    generator = torch.Generator().manual_seed(seed)
    probe_split = "validation" if validation is not None and len(validation) >= 2 else "train"
    probe = (validation if probe_split == "validation" else train_split).subset(slice(0, cfg.probe_examples))
    probe_fit = train_split.subset(slice(0, cfg.probe_examples))  # the linear probes' training rows
    initial = [m.learning_phase_parameters()[0].detach().clone() for m in modules]
    was_training = model.training
    flags = {id(p): p.requires_grad for p in model.parameters()}
    moving = {id(p) for m in modules for p in m.learning_phase_parameters()}
    extra = [p for p in norm_value_parameters(model) if id(p) not in moving] if cfg.train_norm_value else []
    moving |= {id(p) for p in extra}
    model.eval()
    capture = AttentionCapture(modules)
    start = time.perf_counter()
    try:
        for p in model.parameters():
            p.requires_grad_(id(p) in moving)
        before = _probe_alignments(model, modules, capture, probe, cfg, device, num_classes)
        probes_before = representation_probes(model, capture, probe_fit, probe, cfg, device)
        distances_before = _distance_sample(modules, generator)
        diagnostics, last, steps, stopped = _run_dynamics(
            model, modules, extra, capture, train_split, cfg, budget, generator, device, num_classes, progress
        )
        if cfg.resample is not None:
            _resample(modules, last, cfg, generator, num_classes)
        after = _probe_alignments(model, modules, capture, probe, cfg, device, num_classes)
        probes_after = representation_probes(model, capture, probe_fit, probe, cfg, device)
    finally:
        capture.remove()
        model.train(was_training)
        for p in model.parameters():
            p.requires_grad_(flags[id(p)])
    moves = [
        float((m.learning_phase_parameters()[0].detach()[:, : w.shape[1]] - w).norm() / w.norm())
        if m.learning_phase_parameters()[0].shape == w.shape
        else math.nan
        for m, w in zip(modules, initial)
    ]
    objective = cfg.objective
    return {
        "seconds": time.perf_counter() - start,
        "steps": steps,
        "budget_steps": budget,
        "stopped_early": stopped,
        "examples_per_step": cfg.batch_size,
        "num_particles": [int(m.learning_phase_parameters()[0].shape[1]) for m in modules],
        "objective": objective,
        "alignment_kind": objective,
        "pooling": cfg.pooling,
        "probe_split": probe_split,
        "probe_rows": len(probe),
        "alignment_before": sum(before[objective]) / len(modules),
        "alignment_after": sum(after[objective]) / len(modules),
        "validation_alignment": {
            kind: {
                "before": sum(before[kind]) / len(modules),
                "after": sum(after[kind]) / len(modules),
                "before_per_layer": before[kind],
                "after_per_layer": after[kind],
            }
            for kind in ALIGNMENTS
        },
        "representation": {
            key: {
                "before": sum(probes_before[key]) / len(modules),
                "after": sum(probes_after[key]) / len(modules),
                "before_per_layer": probes_before[key],
                "after_per_layer": probes_after[key],
            }
            for key in probes_before
        },
        "walk": walk_summary(diagnostics),
        "relative_move_per_layer": moves,
        "relative_move": sum(moves) / len(moves),
        "diagnostics": diagnostics,
        "distances_before": distances_before,
        "distances_after": _distance_sample(modules, generator),
        "config": _json_config(cfg),
    }


def _output_step(
    modules: list[nn.Module],
    params: list[Tensor],
    extra: list[nn.Parameter],
    capture: AttentionCapture,
    labels: Tensor,
    cfg: PhaseAConfig,
    generator: torch.Generator,
    num_classes: int,
) -> list[tuple[Tensor, list[dict[str, float]]]]:
    """One step of every layer on an output objective: each layer's particles down the gradient of its own
    H = -V(pooled outputs) + lambda sum_h W_h (the captured graph), LayerNorm and value parameters (`extra`) down
    the gradient of the sum over layers. Returns each layer's new particles (H, M, d) and per-head rows."""
    results, total = [], 0.0
    for i, (_module, param) in enumerate(zip(modules, params)):
        q, k, mask = capture.inputs[i]
        rows, y = pooled_outputs(capture.outputs[i], mask, labels, cfg.pooling)
        align = output_alignment(cfg.objective, rows, y, num_classes).double()
        energy = cfg.energy(param)
        hamiltonian = cfg.hamiltonian(align, energy.sum(), rows.shape[0], param.shape[1])
        (grad,) = torch.autograd.grad(hamiltonian, param, retain_graph=True)
        total = total + hamiltonian
        new, moved = cfg.move(param.detach(), grad, generator)
        align, energy = align.detach(), energy.detach()
        head_rows = [
            {
                "H": float(-align + cfg.repulsion * energy[h]),
                "alignment": float(align),
                "energy": float(energy[h]),
                "max_move": float((new[h] - param[h].detach()).norm(dim=-1).max()),
                **{key: float(value[h]) for key, value in moved.items()},
            }
            for h in range(param.shape[0])
        ]
        results.append((new, head_rows))
    if extra:
        grads = torch.autograd.grad(total, extra, allow_unused=True)
        with torch.no_grad():
            for p, g in zip(extra, grads):
                if g is not None:
                    p.sub_(cfg.step * g)
    return results


def _run_dynamics(
    model: nn.Module,
    modules: list[nn.Module],
    extra: list[nn.Parameter],
    capture: AttentionCapture,
    train: Split,
    cfg: PhaseAConfig,
    budget: int,
    generator: torch.Generator,
    device: torch.device,
    num_classes: int,
    progress: Progress | None,
) -> tuple[list, list[tuple[Tensor, Tensor]], int, bool]:
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
            with torch.set_grad_enabled(cfg.objective != "input-kernel"):
                labels = capture.run(model, batch, device)
            last = [
                (x.detach(), y) for x, y in (representations(*inputs, labels, cfg.pooling) for inputs in capture.inputs)
            ]
            if cfg.objective == "input-kernel":
                steps_taken = [
                    _input_kernel_step(module, param, x, y, cfg, generator, num_classes, on)
                    for module, param, (x, y), on in zip(modules, params, last, active)
                ]
            else:
                steps_taken = _output_step(modules, params, extra, capture, labels, cfg, generator, num_classes)
            for i, (param, (new, rows)) in enumerate(zip(params, steps_taken)):
                new = torch.where(active[i].to(new.device)[:, None, None], new, param.detach())
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


def _input_kernel_step(
    module: nn.Module,
    param: Tensor,
    x: Tensor,
    y: Tensor,
    cfg: PhaseAConfig,
    generator: torch.Generator,
    num_classes: int,
    active: Tensor,
) -> tuple[Tensor, list[dict[str, float]]]:
    """One eq. 2.2 step of one layer's heads (`particle_step`) on its pooled feature-map inputs x (1, H, n, d)."""
    x = x.detach()

    def features(w: Tensor) -> Tensor:
        return module.feature_map.kernel_features(x, w)[0]  # (H, n, k*M)

    return particle_step(param.detach(), features, y, cfg, generator=generator, num_classes=num_classes, active=active)
