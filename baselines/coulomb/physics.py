"""The Coulomb particle model (docs/paper.md): learned random-feature kernels for linear attention.

The omegas of a random-feature map are particles moved by projected Langevin dynamics on
H(Omega) = -A(Omega) + lambda * W_s(Omega): an alignment A pulls them towards features that separate
the labels, the Riesz energy W_s pushes them apart. The physics lives in plain functions
(`within_class_alignment`, eq. C.4, the default objective on the attention outputs;
`kernel_target_alignment`, eq. 2.2 and Appendix D; `riesz_energy`; `langevin_step`, `langevin_move`;
`particle_step`, `align_particles` for the generic eq. 2.2 setting); `CoulombAttention` is the
random-features attention whose omegas are the particles (nn.Parameter), moved only by phase A
(`attnbench.baselines.coulomb.phase_a`, the procedure the registry entry names).

Where the factor N of the paper's update lives: H averages over particles, so dH/d omega_k is
O(1/N); the callers multiply the autograd gradient by N (the mean-field force on particle k)
before clipping and pass that force to `langevin_move`, which applies it as given.

Force normalisation (`DynamicsConfig.force`): "mean" (the paper's text, the default) is that force,
N d/d omega_k (-A + lambda W) with A and W the averages the paper writes; "sum" is the gradient of the
sums those averages divide, d/d omega_k (-P A + lambda N(N-1) W) with P = n(n-1) for a batch of n
examples (A's pairs; W's unordered pairs of particles times 2 over 2): about n^2 / N times the
alignment force and N times the repulsion of "mean" (`DynamicsConfig.hamiltonian`, `force_factor`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from typing import Literal

import torch
from torch import Tensor, nn

from attnbench.baselines.random_projections import project_to_ball
from attnbench.errors import ConfigError
from attnbench.options import option, require

AlignmentKind = Literal["ustat", "normalized", "centered"]
ALIGNMENT_KINDS: tuple[str, ...] = AlignmentKind.__args__
MAX_LOG_FLOAT64 = 700.0  # exp(709) is the largest float64; keep a margin for the gradient's factors


# --- alignment -------------------------------------------------------------------------------------


def _target_factors(num_classes: int) -> tuple[float, float]:
    """T = a E E^T - b 1 1^T (E one-hot): T_ij = 1 for the same class, -1/(C-1) otherwise; +-1 when C = 2."""
    return num_classes / (num_classes - 1), 1.0 / (num_classes - 1)


def _one_hot(y: Tensor, num_classes: int | None, dtype: torch.dtype) -> Tensor:
    if y.ndim != 1:
        raise ValueError(f"labels must be a 1-D tensor of class indices, got shape {tuple(y.shape)}")
    if y.numel() and int(y.min()) < 0:
        raise ValueError(f"labels must be class indices >= 0, got minimum {int(y.min())}")
    c = max(2, int(y.max()) + 1) if num_classes is None else num_classes
    return nn.functional.one_hot(y.long(), c).to(dtype)


def kernel_target_alignment(phi: Tensor, y: Tensor, kind: str = "ustat", *, num_classes: int | None = None) -> Tensor:
    """Alignment of K = Phi Phi^T / M with the label kernel T: phi (n, M), y (n,) class indices -> scalar.

    ustat: the paper's 1/(n(n-1)) sum_{i != j} T_ij K_ij; normalized: <K, T>_F / (|K|_F |T|_F)
    (Cristianini et al.); centered: the same for H K H and H T H, H = I - 11^T/n (Cortes et al.).
    T_ij = y_i y_j for binary labels mapped to +-1, and 1 / -1/(C-1) for same / different class when
    C > 2 (`num_classes`; default max(y) + 1, at least 2). Never forms an n x n matrix: ustat costs
    O(nM), the other two O(nM^2) for the M x M matrix Phi^T Phi; memory O(nM + M^2). Differentiable.
    """
    if kind not in ALIGNMENT_KINDS:
        raise ConfigError(f"alignment kind {kind!r} is unknown; choose one of: {', '.join(ALIGNMENT_KINDS)}")
    n, m = phi.shape
    if n < 2:
        raise ValueError(f"alignment needs at least 2 examples, got {n}")
    e = _one_hot(y, num_classes, phi.dtype)
    a, b = _target_factors(e.shape[1])
    if kind == "centered":
        phi, e = phi - phi.mean(dim=0), e - e.mean(dim=0)  # then H T H = a E_c E_c^T exactly
    class_sums = e.T @ phi  # (C, M)
    inner = a * class_sums.square().sum()
    if kind != "centered":
        inner = inner - b * phi.sum(dim=0).square().sum()
    inner = inner / m  # <K, T>_F
    if kind == "ustat":
        return (inner - phi.square().sum() / m) / (n * (n - 1))  # T_ii = 1 removes the diagonal
    k_norm = torch.linalg.matrix_norm(phi.T @ phi) / m
    if kind == "centered":
        t_norm = a * torch.linalg.matrix_norm(e.T @ e)
    else:
        counts = e.sum(dim=0)
        t_norm = torch.sqrt((a * a - 2 * a * b) * counts.square().sum() + (b * n) ** 2)
    return inner / (k_norm * t_norm).clamp_min(torch.finfo(phi.dtype).tiny)


def within_class_alignment(pooled: Tensor, labels: Tensor) -> Tensor:
    """Eq. C.4: 1/(n(n-1)) sum_{i<j} [y_i = y_j] <pooled_i, pooled_j>: pooled (n, d) float, labels (n,) int -> scalar.

    Only same-class pairs count; no centring, no normalisation. By class sums S_c = sum_{y_i = c} p_i:
    sum_{i<j, same class} <p_i, p_j> = (sum_c |S_c|^2 - sum_i |p_i|^2) / 2, so O(n d) time; differentiable.
    """
    n = pooled.shape[0]
    if n < 2:
        raise ValueError(f"alignment needs at least 2 examples, got {n}")
    e = _one_hot(labels, None, pooled.dtype)
    class_sums = e.T @ pooled  # (C, d)
    return (class_sums.square().sum() - pooled.square().sum()) / (2 * n * (n - 1))


def particle_alignments(phi: Tensor, y: Tensor, num_particles: int, *, num_classes: int | None = None) -> Tensor:
    """Each particle's share of the ustat alignment, times M: phi (n, k*M) in k blocks of M -> (M,); mean = ustat."""
    n = phi.shape[0]
    e = _one_hot(y, num_classes, phi.dtype)
    a, b = _target_factors(e.shape[1])
    per_column = a * (e.T @ phi).square().sum(0) - b * phi.sum(0).square() - phi.square().sum(0)
    per_column = per_column / (n * (n - 1)) * (num_particles / phi.shape[1])
    return per_column.view(-1, num_particles).sum(dim=0)


# --- repulsion ---------------------------------------------------------------------------------------


def coulomb_exponent(dim: int, s: float | None) -> float:
    """The Riesz exponent: `s` if given, else Coulomb's d - 2 (which must not be negative)."""
    s = dim - 2 if s is None else s
    if s < 0:
        raise ConfigError(f"Riesz exponent s={s} is negative (particle dimension {dim}); give riesz_s >= 0")
    return float(s)


def pairwise_squared_distances(omega: Tensor) -> Tensor:
    """|w_k - w_l|^2 in float64 by the Gram form (one matmul, no (M, M, d) tensor): (M, d) -> (M, M)."""
    w = omega.double()
    sq = w.square().sum(dim=1)
    return (sq[:, None] + sq[None, :] - 2 * (w @ w.T)).clamp_min(0.0)


def _pair_kernel_terms(omega: Tensor, s: float, eps: float) -> Tensor:
    """(M, M) float64: log g_s(r_kl) for s > 0 (diagonal -inf), g_0(r_kl) for s = 0 (diagonal 0)."""
    diagonal = torch.eye(omega.shape[0], dtype=torch.bool, device=omega.device)
    log_r2 = torch.log((pairwise_squared_distances(omega) + eps * eps).masked_fill(diagonal, 1.0))  # no log 0 on k = l
    if s == 0:
        return (-0.5 * log_r2).masked_fill(diagonal, 0.0)
    return (-0.5 * s * log_r2).masked_fill(diagonal, -math.inf)


def _check_softening(s: float, eps: float) -> None:
    if eps < 0:
        raise ConfigError(f"softening eps={eps} must be >= 0 (0 = none, the paper's)")
    if eps == 0:
        return
    worst = s / 2 * math.log(1 / eps**2) if eps < 1 else 0.0  # log g_s at r = 0
    if worst + math.log(max(s, 1.0)) + 2 * math.log(max(1 / eps, 1.0)) > MAX_LOG_FLOAT64:
        raise ConfigError(
            f"Riesz exponent s={s} with softening eps={eps} overflows float64 at coincident "
            f"particles (eps^-s = e^{worst:.0f}); raise the softening or lower s"
        )


def riesz_energy(omega: Tensor, s: float | None = 0.0, eps: float = 0.0) -> Tensor:
    """W_{N,s} = 1/(2N(N-1)) sum_{k != l} g_s(|w_k - w_l|) (eq. 2.3): omega (N, d) -> float64 scalar.

    g_0(r) = -log r (log repulsion, the paper's experiments), g_s(r) = r^-s for s > 0; s = None means
    Coulomb, s = d - 2. eps > 0 softens r^2 to r^2 + eps^2 (the paper uses none: coincident particles then
    give inf). Summed in log space (logsumexp) in float64, so far particles do not underflow to nan.
    """
    m, d = omega.shape
    if m < 2:
        raise ValueError(f"the Riesz energy needs at least 2 particles, got {m}")
    s = coulomb_exponent(d, s)
    _check_softening(s, eps)
    terms = _pair_kernel_terms(omega, s, eps)
    if s == 0:
        return terms.sum() / (2 * m * (m - 1))
    return torch.exp(torch.logsumexp(terms.flatten(), dim=0) - math.log(2 * m * (m - 1)))


def particle_potentials(omega: Tensor, s: float | None = 0.0, eps: float = 0.0) -> Tensor:
    """Each particle's repulsion potential (g_s * rho)(w_k) = 1/(N-1) sum_{l != k} g_s: (N, d) -> (N,); mean = 2 W."""
    m, d = omega.shape
    s = coulomb_exponent(d, s)
    _check_softening(s, eps)
    terms = _pair_kernel_terms(omega, s, eps)
    if s == 0:
        return terms.sum(dim=1) / (m - 1)
    return torch.exp(torch.logsumexp(terms, dim=1) - math.log(m - 1))


# --- dynamics ----------------------------------------------------------------------------------------


def _drift_and_noise(
    omega: Tensor, grad: Tensor, step: float, beta: float, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """step * grad and sqrt(2 step / beta) xi (zeros for beta = inf), xi drawn on the CPU from `generator`."""
    if not math.isfinite(beta):
        return step * grad, torch.zeros_like(omega)
    xi = torch.randn(omega.shape, generator=generator, dtype=omega.dtype).to(omega.device)
    return step * grad, math.sqrt(2 * step / beta) * xi


def langevin_step(
    omega: Tensor, grad: Tensor, step: float, beta: float, radius: float, generator: torch.Generator | None = None
) -> Tensor:
    """One projected Langevin update P(omega - step * grad + sqrt(2 step / beta) xi): (..., M, d) -> same.

    `grad` is applied as given (the caller scales by N, see the module docstring); beta = inf gives
    plain projected gradient descent. xi is drawn on the CPU from `generator`, so runs repeat exactly
    on any device.
    """
    drift, noise = _drift_and_noise(omega, grad, step, beta, generator)
    return project_to_ball(omega - drift + noise, radius)


def langevin_move(
    omega: Tensor, grad: Tensor, step: float, beta: float, radius: float, generator: torch.Generator | None = None
) -> tuple[Tensor, dict[str, Tensor]]:
    """`langevin_step` with what shows whether it is a walk: omega (S, M, d) -> new (S, M, d) and, per system (S,),
    the median over particles of |drift| = |step grad| and |noise| = |sqrt(2 step / beta) xi|, the mean particle
    norm before and after the projection, and the fraction of particles the projection moved."""
    drift, noise = _drift_and_noise(omega, grad, step, beta, generator)
    new = omega - drift + noise
    projected = project_to_ball(new, radius)
    norms = new.norm(dim=-1)
    stats = {
        "drift": drift.norm(dim=-1).median(dim=-1).values,
        "noise": noise.norm(dim=-1).median(dim=-1).values,
        "norm_before_projection": norms.mean(dim=-1),
        "norm_after_projection": projected.norm(dim=-1).mean(dim=-1),
        "projected_fraction": (norms > radius).double().mean(dim=-1),
    }
    return projected, stats


def clip_forces(force: Tensor, clip: float) -> Tensor:
    """Each particle's force (last axis) scaled down to norm <= clip."""
    return force * (clip / force.norm(dim=-1, keepdim=True).clamp_min(1e-30)).clamp(max=1.0)


@dataclasses.dataclass
class DynamicsConfig:
    """Phase-A particle dynamics (defaults: the paper's, docs/paper.md "phase A"; units are ours)."""

    step: float = option(2e-3, "Langevin step eta (paper: 2e-3)")
    beta: float = option(50.0, "inverse temperature; inf = no noise (paper: 50)")
    repulsion: float = option(1e-3, "repulsion weight lambda (paper: 1e-3)")
    riesz_s: float | None = option(
        0.0, "Riesz exponent s: 0 = log repulsion (paper), s > 0 Riesz, None = Coulomb d - 2"
    )
    softening: float = option(0.0, "eps of the softened kernel (r^2 + eps^2)^(-s/2); 0 = none (paper)")
    grad_clip: float = option(
        10.0, "clip each particle's force N * dH/domega_k to this norm (paper: 10; per particle is ours)"
    )
    radius: float = option(1.5, "particle norm cap R (paper: 1.5)")
    radius_units: Literal["sqrt_dim", "absolute"] = option(
        "sqrt_dim",
        "units of R, softening and repulsion distances: sqrt(d), the typical norm of a Gaussian "
        "omega (ours; keeps the initial Gaussian particles inside the cap), or absolute (literal paper; the paper suites)",
    )
    tolerance: float = option(1e-6, "stop when the largest particle move falls below this (paper: 1e-6)")
    alignment: AlignmentKind = option(
        "ustat", "eq. 2.2 alignment of the feature-map kernel: ustat (paper), normalized, centered"
    )
    force: Literal["mean", "sum"] = option(
        "mean",
        "force normalisation: mean, N dH/domega_k with A and W the averages of the text (paper); sum, the "
        "gradient of -n(n-1) A + lambda N(N-1) W, the sums over example pairs and particle pairs (ours)",
    )

    def __post_init__(self) -> None:
        require(self.step > 0, f"step={self.step} must be positive")
        require(self.beta > 0, f"beta={self.beta} must be positive (inf = no noise)")
        require(self.repulsion >= 0, f"repulsion={self.repulsion} must be >= 0")
        require(self.grad_clip > 0, f"grad_clip={self.grad_clip} must be positive")
        require(self.radius > 0, f"radius={self.radius} must be positive")
        require(self.tolerance >= 0, f"tolerance={self.tolerance} must be >= 0")
        require(self.softening >= 0, f"softening={self.softening} must be >= 0 (0 = none)")

    def unit(self, dim: int) -> float:
        """Length unit of R and of repulsion distances for particles of dimension `dim`."""
        return math.sqrt(dim) if self.radius_units == "sqrt_dim" else 1.0

    def energy(self, omega: Tensor) -> Tensor:
        """W_s of each system's particles in the configured units: omega (S, N, d) -> (S,) float64."""
        unit = self.unit(omega.shape[-1])
        return torch.stack([riesz_energy(w / unit, self.riesz_s, self.softening) for w in omega])

    def hamiltonian(self, alignment: Tensor, energy: Tensor, examples: int, particles: int) -> Tensor:
        """The H whose gradient, times `force_factor`, is the force: -A + lambda W (mean), or
        -n(n-1) A + lambda N(N-1) W (sum) for a batch of n `examples` and N `particles` per system."""
        if self.force == "sum":
            return -examples * (examples - 1) * alignment + self.repulsion * particles * (particles - 1) * energy
        return -alignment + self.repulsion * energy

    def force_factor(self, particles: int) -> float:
        """What multiplies the gradient of `hamiltonian` to give the force: N (mean field, the paper's), 1 (sum)."""
        return 1.0 if self.force == "sum" else float(particles)

    def move(
        self, omega: Tensor, grad: Tensor, generator: torch.Generator | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """One projected Langevin move of systems omega (S, N, d) from the gradient of `hamiltonian`: the force
        (`force_factor` times it) clipped per particle."""
        force = clip_forces(self.force_factor(omega.shape[-2]) * grad, self.grad_clip)
        return langevin_move(omega, force, self.step, self.beta, self.radius * self.unit(omega.shape[-1]), generator)


Features = Callable[[Tensor], Tensor]  # particles (S, M, d) -> features (S, n, k*M), Gram / (k*M) = kernel


def particle_step(
    omega: Tensor,
    features: Features,
    labels: Tensor,
    cfg: DynamicsConfig,
    *,
    generator: torch.Generator | None = None,
    num_classes: int | None = None,
    active: Tensor | None = None,
) -> tuple[Tensor, list[dict[str, float]]]:
    """One Langevin step of S independent particle systems omega (S, M, d) on one batch.

    Returns the new particles (S, M, d) and per system {H, alignment, energy} at the start of the
    step, {max_move, min_distance, mean_norm} after it and the move's statistics (`langevin_move`).
    Systems with active[s] False stay put.
    """
    num, m, d = omega.shape
    w = omega.detach().clone().requires_grad_(True)
    phi = features(w)
    align = torch.stack(
        [kernel_target_alignment(phi[i], labels, cfg.alignment, num_classes=num_classes) for i in range(num)]
    )
    energy = cfg.energy(w)
    hamiltonian = -align.double() + cfg.repulsion * energy
    scaled = cfg.hamiltonian(align.double(), energy, labels.shape[0], m)
    (grad,) = torch.autograd.grad(scaled.sum(), w)
    new, moved = cfg.move(omega.detach(), grad, generator)
    if active is not None:
        new = torch.where(active.to(new.device)[:, None, None], new, omega.detach())
    moves = (new - omega).norm(dim=-1).amax(dim=-1)
    eye = torch.eye(m, dtype=torch.bool, device=new.device)
    min_distance = torch.stack(
        [pairwise_squared_distances(new[i]).masked_fill(eye, math.inf).min().sqrt() for i in range(num)]
    )
    mean_norm = new.norm(dim=-1).mean(dim=-1)
    columns = [
        hamiltonian.detach(),
        align.detach().double(),
        energy.detach(),
        moves.double(),
        min_distance.double(),
        mean_norm.double(),
        *(t.double() for t in moved.values()),
    ]
    keys = ("H", "alignment", "energy", "max_move", "min_distance", "mean_norm", *moved)
    table = torch.stack(columns, dim=1).cpu().tolist()
    return new, [dict(zip(keys, row)) for row in table]


def resample_particles(
    omega: Tensor,
    phi: Tensor,
    labels: Tensor,
    count: int,
    cfg: DynamicsConfig,
    *,
    weights: Literal["gibbs", "uniform"] = "gibbs",
    generator: torch.Generator | None = None,
    num_classes: int | None = None,
) -> Tensor:
    """Draw `count` distinct particles from the final configuration omega (M, d) -> (count, d) (`resample_index`)."""
    return omega[
        resample_index(omega, phi, labels, count, cfg, weights=weights, generator=generator, num_classes=num_classes)
    ]


def resample_index(
    omega: Tensor,
    phi: Tensor,
    labels: Tensor,
    count: int,
    cfg: DynamicsConfig,
    *,
    weights: Literal["gibbs", "uniform"] = "gibbs",
    generator: torch.Generator | None = None,
    num_classes: int | None = None,
) -> Tensor:
    """Indices (count,), ascending, of `count` distinct particles drawn from the final configuration omega (M, d).

    gibbs: probability proportional to exp(-beta U_k) with the per-particle potential
    U_k = -a_k + lambda (g_s * rho)(w_k), a_k particle k's ustat alignment on features phi (n, k*M)
    (for beta = inf: the `count` lowest U_k); uniform: every particle equally likely.
    """
    m, d = omega.shape
    if not 1 <= count <= m:
        raise ConfigError(f"resample={count} must lie in [1, {m}] (the number of particles)")
    if weights == "uniform":
        index = torch.randperm(m, generator=generator)[:count]
    else:
        potential = -particle_alignments(
            phi, labels, m, num_classes=num_classes
        ).double() + cfg.repulsion * particle_potentials(omega / cfg.unit(d), cfg.riesz_s, cfg.softening)
        potential = potential.cpu()
        if math.isfinite(cfg.beta):
            logits = -cfg.beta * potential
            index = torch.multinomial(
                torch.softmax(logits - logits.max(), 0), count, replacement=False, generator=generator
            )
        else:
            index = torch.argsort(potential)[:count]
    return index.sort().values.to(omega.device)


def align_particles(
    omega: Tensor,
    batches: Iterable[tuple[Features, Tensor]],
    cfg: DynamicsConfig,
    *,
    max_steps: int,
    generator: torch.Generator | None = None,
    num_classes: int | None = None,
) -> tuple[Tensor, list[list[dict[str, float]]]]:
    """Run the dynamics of S systems omega (S, M, d) over (features, labels) batches (cycled).

    Stops after `max_steps` steps or when every system's largest particle move falls below
    cfg.tolerance (a stopped system stays put). Returns the particles and per-system step diagnostics.
    """
    batches = list(batches)
    if not batches:
        raise ValueError("align_particles needs at least one batch")
    active = torch.ones(omega.shape[0], dtype=torch.bool)
    history: list[list[dict[str, float]]] = [[] for _ in range(omega.shape[0])]
    for step in range(max_steps):
        features, labels = batches[step % len(batches)]
        omega, diagnostics = particle_step(
            omega, features, labels, cfg, generator=generator, num_classes=num_classes, active=active
        )
        for i, row in enumerate(diagnostics):
            if active[i]:
                history[i].append(row)
        active &= torch.tensor([row["max_move"] >= cfg.tolerance for row in diagnostics])
        if not active.any():
            break
    return omega, history
