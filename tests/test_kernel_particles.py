"""Langevin particles of the synthetic experiment: the analytic drift, energies, clipping, dynamics and Gibbs resampling."""

from __future__ import annotations

import math

import pytest
import torch

from attnbench.baselines.coulomb.kernel_particles import (
    ParticleDynamics,
    clip_per_particle,
    gibbs_resample,
    hamiltonian_drift,
    learn_features,
    particle_energies,
    run_dynamics,
)


def naive_hamiltonian(x, y, omega, phase, lam, s):
    """docs/paper.md's H by its double sums, for one system: omega (N, p), phase (N,)."""
    n, num = x.shape[0], omega.shape[0]
    phi = math.sqrt(2) * torch.cos(x @ omega.T + phase)
    kernel = phi @ phi.T / num
    alignment = sum(y[i] * y[j] * kernel[i, j] for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    energy = 0.0
    for k in range(num):
        for m in range(num):
            if k != m:
                r = (omega[k] - omega[m]).norm()
                energy = energy + (-torch.log(r) if s == 0 else r**-s)
    return -alignment + lam * energy / (2 * num * (num - 1))


@pytest.fixture
def system():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(14, 5, generator=g, dtype=torch.float64)
    y = torch.where(torch.rand(14, generator=g) < 0.5, -1.0, 1.0).double()
    omega = torch.randn(2, 9, 5, generator=g, dtype=torch.float64)
    phase = torch.rand(2, 9, generator=g, dtype=torch.float64) * 6
    return x, y, omega, phase, torch.tensor([0.5, 1.3], dtype=torch.float64)


@pytest.mark.parametrize("s", [0.0, 3.0])
def test_drift_is_n_times_the_gradient_of_the_naive_hamiltonian(system, s):
    x, y, omega, phase, lam = system
    w, b = omega.clone().requires_grad_(True), phase.clone().requires_grad_(True)
    total = sum(naive_hamiltonian(x, y, w[i], b[i], lam[i], s) for i in range(2))
    total.backward()
    d_omega, d_phase = hamiltonian_drift(x, y, omega, phase, lam, s)
    assert torch.allclose(d_omega, 9 * w.grad, atol=1e-12, rtol=1e-9)
    assert torch.allclose(d_phase, 9 * b.grad, atol=1e-12, rtol=1e-9)
    assert d_omega.abs().max() > 1e-3  # not trivially zero


@pytest.mark.parametrize("s", [0.0, 3.0])
def test_particle_energies_average_to_the_hamiltonian(system, s):
    x, y, omega, phase, lam = system
    shares = particle_energies(x, y, omega, phase, lam, s)
    for i in range(2):
        assert shares[i].mean().item() == pytest.approx(
            naive_hamiltonian(x, y, omega[i], phase[i], lam[i], s).item(), rel=1e-10, abs=1e-13
        )


def test_clip_bounds_each_particle_jointly_and_keeps_small_ones():
    d_omega = torch.tensor([[[3.0, 4.0], [0.1, 0.0]]], dtype=torch.float64)
    d_phase = torch.tensor([[0.0, 0.1]], dtype=torch.float64)
    w, b = clip_per_particle(d_omega, d_phase, 1.0)
    assert torch.allclose(w[0, 0], torch.tensor([0.6, 0.8], dtype=torch.float64))
    assert torch.equal(w[0, 1], d_omega[0, 1]) and torch.equal(b, d_phase)


def test_dynamics_respect_the_frequency_cap_and_wrap_phases(system):
    x, y, omega, phase, lam = system
    cfg = ParticleDynamics(num_particles=9, steps=20, radius=1.2)
    g = torch.Generator().manual_seed(0)
    new_omega, new_phase, drift, clipped = run_dynamics(x, y, omega, phase, lam, cfg, g)
    assert drift.shape == clipped.shape == (20, 2) and (drift <= cfg.step * cfg.grad_clip + 1e-12).all()
    assert new_omega.norm(dim=-1).max() <= 1.2 + 1e-12
    assert new_phase.min() >= 0 and new_phase.max() < 2 * math.pi
    assert not torch.allclose(new_omega, omega)


def test_noise_free_small_steps_lower_the_hamiltonian(system):
    x, y, omega, phase, lam = system
    cfg = ParticleDynamics(num_particles=9, steps=30, step=0.05, beta=math.inf, radius=50.0, grad_clip=1e9)
    before = particle_energies(x, y, omega, phase, lam).mean(-1)
    new_omega, new_phase, _, clipped = run_dynamics(x, y, omega, phase, lam, cfg, torch.Generator())
    after = particle_energies(x, y, new_omega, new_phase, lam).mean(-1)
    assert clipped.max() == 0
    assert (after < before).all()


def test_gibbs_resampling_draws_in_proportion_to_exp_minus_beta_h():
    energies = torch.tensor([[0.0, 0.01, 0.02, -0.01]], dtype=torch.float64)
    beta = 100.0
    expected = torch.exp(-beta * energies[0]) / torch.exp(-beta * energies[0]).sum()
    g = torch.Generator().manual_seed(0)
    draws = torch.cat([gibbs_resample(energies, 1, beta, g)[0] for _ in range(20000)])
    frequencies = torch.bincount(draws, minlength=4).double() / 20000
    assert torch.allclose(frequencies, expected, atol=0.012)
    kept = gibbs_resample(energies.expand(3, -1), 3, beta, g)
    assert all(len(set(row.tolist())) == 3 for row in kept)  # distinct, sorted
    assert torch.equal(kept, kept.sort(-1).values)


def test_learn_features_keeps_d_of_n_particles_per_lambda():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(20, 5, generator=g, dtype=torch.float64)
    y01 = (torch.rand(20, generator=g) < 0.5).long()
    omega, phase, diagnostics = learn_features(
        x, y01, [0.5, 0.0], 6, 0.5, ParticleDynamics(num_particles=10, steps=5), g
    )
    assert omega.shape == (2, 6, 5) and phase.shape == (2, 6)
    assert omega.norm(dim=-1).max() <= 5.0 + 1e-12
    y = 2.0 * y01.double() - 1
    phi = math.sqrt(2) * torch.cos(x @ omega[1].T + phase[1])  # the kept particles' kernel, by its double sum
    kernel = phi @ phi.T / 6
    naive = ((y[:, None] * y[None] * kernel).sum() - (y * y * kernel.diag()).sum()) / (20 * 19)
    assert diagnostics[1]["alignment_kept"] == pytest.approx(naive.item())
    assert diagnostics[0]["noise_norm"] == pytest.approx(math.sqrt(2 * 30 / 100) * math.sqrt(6))
    assert diagnostics[0]["drift_to_noise"] == pytest.approx(
        diagnostics[0]["drift_median"] / diagnostics[0]["noise_norm"]
    )
