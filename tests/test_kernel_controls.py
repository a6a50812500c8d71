"""Controls of the synthetic experiment (Appendix F.1): the walk without force, the force without noise, RFF
projected onto the frequency cap."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnbench.baselines.coulomb import kernel_methods as km
from attnbench.baselines.coulomb.kernel_experiment import KernelExperimentConfig, methods
from attnbench.baselines.coulomb.kernel_particles import (
    ParticleDynamics,
    gibbs_resample,
    initial_particles,
    run_dynamics,
)
from attnbench.baselines.coulomb.physics import langevin_step
from attnbench.errors import ConfigError


def test_no_drift_control_is_the_walk_of_noise_and_projection_alone():
    g1, g2 = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    x = torch.randn(12, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = torch.tensor([1.0, -1.0] * 6, dtype=torch.float64)
    omega, phase = initial_particles(1, 5, 3, 0.5, torch.Generator().manual_seed(1))
    cfg = ParticleDynamics(num_particles=5, steps=4, step=0.5, beta=10.0, radius=1.0, drift=False)
    walked, walked_phase, _, _ = run_dynamics(x, y, omega, phase, torch.tensor([0.5], dtype=torch.float64), cfg, g1)
    by_hand, by_hand_phase = omega, phase
    for _ in range(4):  # P(omega + sqrt(2 eta / beta) xi), xi from the same stream, as langevin_step draws it
        by_hand = langevin_step(by_hand, torch.zeros_like(by_hand), 0.5, 10.0, 1.0, g2)
        by_hand_phase = langevin_step(
            by_hand_phase[..., None], torch.zeros_like(by_hand_phase[..., None]), 0.5, 10.0, math.inf, g2
        )[..., 0].remainder(2 * math.pi)
    torch.testing.assert_close(walked, by_hand)
    torch.testing.assert_close(walked_phase, by_hand_phase)


def test_gibbs_resample_at_infinite_beta_keeps_the_lowest_energies():
    energies = torch.tensor([[0.3, -1.0, 0.2, -0.5, 2.0]])
    assert gibbs_resample(energies, 2, math.inf, torch.Generator()).tolist() == [[1, 3]]


def test_projected_rff_caps_the_frequencies_and_equals_rff_below_the_cap(monkeypatch):
    rng = np.random.default_rng(0)
    split = km.Split(
        rng.standard_normal((40, 5)), (rng.uniform(size=40) > 0.5).astype(int), rng.standard_normal((10, 5))
    )
    same = [
        f(split, np.random.default_rng(3), 20, 0.5, *extra)
        for f, extra in ((km.random_fourier_features, ()), (km.projected_random_fourier_features, (1e9,)))
    ]
    assert np.array_equal(same[0], same[1])  # a cap no draw reaches changes nothing
    seen, original = [], km.fourier_features
    monkeypatch.setattr(km, "fourier_features", lambda x, w, b: seen.append(w) or original(x, w, b))
    km.projected_random_fourier_features(split, np.random.default_rng(3), 20, 0.5, 0.5)
    drawn = np.random.default_rng(3).normal(0.0, 1.0, (5, 20))  # the same stream: W ~ N(0, 2 gamma I), gamma 0.5
    norms = np.linalg.norm(drawn, axis=0)
    np.testing.assert_allclose(seen[0], drawn * np.minimum(1.0, 0.5 / norms))


def test_controls_are_methods_only_when_asked():
    assert not any("noise" in name or "projected" in name for name in methods(KernelExperimentConfig(), [0.5]))
    names = methods(
        KernelExperimentConfig(controls=["rff-projected", "langevin-noise-only", "langevin-no-noise"]), [0.5]
    )
    assert {"rff-projected", "langevin-noise-only lambda=0.5", "langevin-no-noise lambda=0.5"} <= set(names)
    with pytest.raises(ConfigError, match="controls"):
        KernelExperimentConfig(controls=["rff-big"])
