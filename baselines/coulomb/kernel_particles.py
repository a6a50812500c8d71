"""Langevin particles of the synthetic experiment (docs/paper.md "Synthetic experiment", Algorithms 1 and 2).

Each particle k is a frequency omega_k (p,) and a phase b_k with the feature
phi_k(x) = sqrt(2) cos(omega_k^T x + b_k), so (1/N) sum_k phi_k(x) phi_k(x') is the learned kernel.
S independent systems (one per repulsion weight lambda) move together, vectorised over (S, N, p):

    H = -1/(n(n-1)) sum_{i != j} y_i y_j (1/N) sum_k phi_k(x_i) phi_k(x_j) + lambda W,
    W = 1/(2N(N-1)) sum_{k != l} g_s(omega_k - omega_l),  g_0 = -log r (log repulsion), g_s = r^-s,

with y in {-1, +1}. H = (1/N) sum_k H_k, H_k = -a_k + lambda/(2(N-1)) sum_{l != k} g_s (each
particle's share), a_k = ((sum_i y_i phi_ki)^2 - sum_i phi_ki^2) / (n(n-1)). The drift is
eta N grad_k H (the analytic gradient), clipped per particle to `grad_clip` over (omega_k, b_k);
the step is `attnbench.baselines.coulomb.langevin_step` (noise sqrt(2 eta / beta) on both), frequencies
projected to |omega_k| <= radius, phases wrapped into [0, 2 pi). Repulsion acts on the
frequencies only (**ours**: the paper names no phase term). Afterwards Algorithm 2 keeps D
distinct particles drawn with probability proportional to exp(-beta H_k).

Controls (`ParticleDynamics`): `drift=False` runs the same steps with no force, so the particles take the
walk of the noise and the projection alone, and keeps D of them uniformly (no learning at all); beta = inf
runs the force alone (and keeps the D lowest H_k).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from attnbench.baselines.coulomb.physics import langevin_step

TWO_PI = 2 * math.pi


@dataclasses.dataclass(frozen=True)
class ParticleDynamics:
    """Settings of Algorithm 1 for the synthetic experiment (defaults: the paper's)."""

    num_particles: int = 300
    step: float = 30.0
    beta: float = 100.0
    steps: int = 2000
    radius: float = 5.0
    grad_clip: float = 1.0
    riesz_s: float = 0.0
    drift: bool = True  # False: a control with no force (noise and projection alone), D of N kept uniformly


def particle_features(x: Tensor, omega: Tensor, phase: Tensor) -> Tensor:
    """sqrt(2) cos(omega_k^T x_i + b_k): x (n, p), omega (S, N, p), phase (S, N) -> (S, N, n)."""
    return math.sqrt(2.0) * torch.cos(omega @ x.T + phase[..., None])


def _inverse_square_distances(omega: Tensor) -> Tensor:
    """1 / |omega_k - omega_l|^2 by the Gram form, 0 on the diagonal: (S, N, p) -> (S, N, N)."""
    sq = omega.square().sum(-1)
    r2 = torch.baddbmm(sq[:, :, None] + sq[:, None, :], omega, omega.transpose(1, 2), alpha=-2.0)
    inverse = r2.clamp_min_(1e-300).reciprocal_()
    return _zero_diagonal(inverse)


def _zero_diagonal(m: Tensor) -> Tensor:
    """m (..., N, N) with its diagonal set to 0 in place."""
    m.diagonal(dim1=-2, dim2=-1).zero_()
    return m


def repulsion_potentials(omega: Tensor, s: float = 0.0) -> Tensor:
    """sum_{l != k} g_s(|omega_k - omega_l|), g_0 = -log r, g_s = r^-s: (S, N, p) -> (S, N)."""
    inverse = _inverse_square_distances(omega)
    g = 0.5 * torch.log(inverse) if s == 0 else inverse.pow(s / 2)
    return _zero_diagonal(g.nan_to_num(0.0, neginf=0.0)).sum(-1)


def particle_energies(x: Tensor, y: Tensor, omega: Tensor, phase: Tensor, lambdas: Tensor, s: float = 0.0) -> Tensor:
    """Each particle's share H_k of H (see the module docstring): (S, N); mean over N is H. y in {-1, +1}."""
    n, num = x.shape[0], omega.shape[1]
    phi = particle_features(x, omega, phase)
    alignment = ((phi @ y).square() - phi.square().sum(-1)) / (n * (n - 1))
    return -alignment + lambdas[:, None] * repulsion_potentials(omega, s) / (2 * (num - 1))


def hamiltonian_drift(
    x: Tensor, y: Tensor, omega: Tensor, phase: Tensor, lambdas: Tensor, s: float = 0.0
) -> tuple[Tensor, Tensor]:
    """N grad_k H by hand: (d omega (S, N, p), d phase (S, N)); the caller clips and steps."""
    n, num = x.shape[0], omega.shape[1]
    u = torch.baddbmm(phase[..., None], omega, x.T.expand(omega.shape[0], -1, -1))
    cos, sin = torch.cos(u), torch.sin(u)
    sums = cos @ y
    # a_k = 2 ((cos_k . y)^2 - |cos_k|^2) / (n(n-1)), so d a_k / d u_ki = -4 (sums_k y_i - cos_ki) sin_ki / (n(n-1))
    dadu = torch.addcmul(cos.neg_(), sums[..., None], y).mul_(sin).mul_(-4.0 / (n * (n - 1)))
    d_omega, d_phase = -(dadu @ x), -dadu.sum(-1)
    # N dW/d omega_k = 1/(N-1) sum_{l != k} g_s'(r) (omega_k - omega_l) / r, g_s'(r) = -s r^(-s-1) (-1/r at s = 0)
    inverse = _inverse_square_distances(omega)
    scale = inverse if s == 0 else s * inverse.pow(s / 2 + 1)
    repulsion = (scale @ omega - scale.sum(-1, keepdim=True) * omega) / (num - 1)
    return d_omega + lambdas[:, None, None] * repulsion, d_phase


def clip_per_particle(d_omega: Tensor, d_phase: Tensor, limit: float) -> tuple[Tensor, Tensor]:
    """Scale each particle's joint (omega, phase) drift down to norm <= limit."""
    norm = (d_omega.square().sum(-1) + d_phase.square()).sqrt()
    factor = (limit / norm.clamp_min(1e-300)).clamp(max=1.0)
    return d_omega * factor[..., None], d_phase * factor


def initial_particles(
    num_systems: int, num_particles: int, dim: int, gamma: float, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """omega ~ N(0, 2 gamma I) (the RBF kernel's spectral draw), b ~ U[0, 2 pi): (S, N, p), (S, N) float64."""
    omega = torch.randn(num_systems, num_particles, dim, generator=generator, dtype=torch.float64)
    phase = torch.rand(num_systems, num_particles, generator=generator, dtype=torch.float64) * TWO_PI
    return omega * math.sqrt(2 * gamma), phase


def run_dynamics(
    x: Tensor,
    y: Tensor,
    omega: Tensor,
    phase: Tensor,
    lambdas: Tensor,
    cfg: ParticleDynamics,
    generator: torch.Generator,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """T_max projected Langevin steps of S systems (Algorithm 1).

    Returns the final omega (S, N, p), phase (S, N), and per step and system the median over particles
    of the drift's length eta |clipped N grad_k H| (T, S) and the share of particles clipped (T, S).
    """
    drift, clipped = [], []
    for _ in range(cfg.steps):
        d_omega, d_phase = hamiltonian_drift(x, y, omega, phase, lambdas, cfg.riesz_s)
        if not cfg.drift:
            d_omega, d_phase = torch.zeros_like(d_omega), torch.zeros_like(d_phase)
        raw = (d_omega.square().sum(-1) + d_phase.square()).sqrt()
        d_omega, d_phase = clip_per_particle(d_omega, d_phase, cfg.grad_clip)
        drift.append(cfg.step * raw.clamp(max=cfg.grad_clip).median(-1).values)
        clipped.append((raw > cfg.grad_clip).double().mean(-1))
        omega = langevin_step(omega, d_omega, cfg.step, cfg.beta, cfg.radius, generator)
        phase = langevin_step(phase[..., None], d_phase[..., None], cfg.step, cfg.beta, math.inf, generator)[
            ..., 0
        ].remainder(TWO_PI)
    return omega, phase, torch.stack(drift), torch.stack(clipped)


def alignment(x: Tensor, y: Tensor, omega: Tensor, phase: Tensor) -> Tensor:
    """The u-statistic 1/(n(n-1)) sum_{i != j} y_i y_j K(x_i, x_j) of the particles' kernel: (S,)."""
    return -particle_energies(x, y, omega, phase, torch.zeros(omega.shape[0], dtype=omega.dtype)).mean(-1)


def gibbs_resample(energies: Tensor, count: int, beta: float, generator: torch.Generator) -> Tensor:
    """Algorithm 2: `count` distinct particle indices per system, P(k) proportional to exp(-beta H_k): (S, N) -> (S, count);
    beta = inf keeps the `count` lowest H_k."""
    if not math.isfinite(beta):
        return torch.argsort(energies, dim=-1)[..., :count].sort(-1).values
    logits = -beta * energies
    weights = torch.softmax(logits - logits.amax(-1, keepdim=True), dim=-1)
    return torch.multinomial(weights, count, replacement=False, generator=generator).sort(-1).values


def learn_features(
    x: Tensor,
    y01: Tensor,
    lambdas: list[float],
    num_features: int,
    gamma: float,
    cfg: ParticleDynamics,
    generator: torch.Generator,
) -> tuple[Tensor, Tensor, list[dict[str, float]]]:
    """Algorithms 1 and 2 for each lambda: x (n, p), labels 0/1 (n,) -> kept omega (S, D, p), phase (S, D), diagnostics.

    Diagnostics per system: the median drift length per particle and step against the noise's typical
    length sqrt(2 eta / beta) sqrt(p + 1) (their ratio says whether the dynamics is a random walk),
    the share of clipped drifts, the alignment before, after and of the D kept particles, and the share
    of frequencies on the cap.
    """
    y = (2.0 * y01 - 1.0).to(torch.float64)
    lam = torch.tensor(lambdas, dtype=torch.float64)
    omega, phase = initial_particles(len(lambdas), cfg.num_particles, x.shape[1], gamma, generator)
    before = alignment(x, y, omega, phase)
    omega, phase, drift, clipped = run_dynamics(x, y, omega, phase, lam, cfg, generator)
    energies = particle_energies(x, y, omega, phase, lam, cfg.riesz_s)
    keep = (
        gibbs_resample(energies, num_features, cfg.beta, generator)
        if cfg.drift
        else gibbs_resample(torch.zeros_like(energies), num_features, 1.0, generator)
    )  # the control: uniform
    kept_omega = omega.gather(1, keep[..., None].expand(-1, -1, omega.shape[-1]))
    kept_phase = phase.gather(1, keep)
    noise = math.sqrt(2 * cfg.step / cfg.beta) * math.sqrt(x.shape[1] + 1) if math.isfinite(cfg.beta) else 0.0
    after, kept = alignment(x, y, omega, phase), alignment(x, y, kept_omega, kept_phase)
    on_cap = (omega.norm(dim=-1) >= cfg.radius * (1 - 1e-9)).double().mean(-1)
    diagnostics = [
        {
            "drift_median": float(drift[:, i].median()),
            "noise_norm": noise,
            "drift_to_noise": float(drift[:, i].median()) / noise if noise else math.inf,
            "clipped_share": float(clipped[:, i].mean()),
            "alignment_before": float(before[i]),
            "alignment_after": float(after[i]),
            "alignment_kept": float(kept[i]),
            "on_cap_share": float(on_cap[i]),
        }
        for i in range(len(lambdas))
    ]
    return kept_omega, kept_phase, diagnostics
