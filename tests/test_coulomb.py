"""The Coulomb physics against naive formulas, and the `coulomb` attention against its Vanilla twin."""

from __future__ import annotations

import math

import pytest
import torch

from attnbench.baselines.coulomb.physics import (
    DynamicsConfig,
    align_particles,
    kernel_target_alignment,
    langevin_move,
    langevin_step,
    particle_alignments,
    particle_potentials,
    particle_step,
    resample_particles,
    riesz_energy,
    within_class_alignment,
)
from attnbench.errors import ConfigError
from attnbench.registry import attention_entry, build_attention


def naive_alignment(phi: torch.Tensor, y: torch.Tensor, kind: str) -> torch.Tensor:
    """The n x n Gram-matrix definitions, written out."""
    n, m = phi.shape
    c = max(2, int(y.max()) + 1)
    k = phi @ phi.T / m
    t = torch.full((n, n), -1.0 / (c - 1), dtype=phi.dtype)
    t[y[:, None] == y[None, :]] = 1.0
    if kind == "ustat":
        total = sum(t[i, j] * k[i, j] for i in range(n) for j in range(n) if i != j)
        return total / (n * (n - 1))
    if kind == "centered":
        h = torch.eye(n, dtype=phi.dtype) - 1.0 / n
        k, t = h @ k @ h, h @ t @ h
    return (k * t).sum() / (k.norm() * t.norm())


@pytest.mark.parametrize("kind", ["ustat", "normalized", "centered"])
@pytest.mark.parametrize("num_classes", [2, 4])
def test_fast_alignment_equals_naive_gram(kind, num_classes):
    g = torch.Generator().manual_seed(num_classes)
    phi = torch.randn(23, 9, generator=g, dtype=torch.float64).exp()  # positive, like most maps
    y = torch.randint(0, num_classes, (23,), generator=g)
    y[:num_classes] = torch.arange(num_classes)
    assert torch.allclose(kernel_target_alignment(phi, y, kind), naive_alignment(phi, y, kind), rtol=1e-10)


@pytest.mark.parametrize("kind", ["ustat", "normalized", "centered"])
def test_alignment_never_forms_the_gram_matrix(kind):
    n = 200_000  # an n x n float32 Gram matrix would take 160 GB
    phi = torch.rand(n, 4, generator=torch.Generator().manual_seed(0))
    y = torch.arange(n) % 3
    assert torch.isfinite(kernel_target_alignment(phi, y, kind))


def test_binary_alignment_is_plus_minus_one_ustat():
    phi = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    y = torch.tensor([0, 0, 1])
    # K = Phi Phi^T / 2: only the pair (0, 1) is non-zero (0.5) and has y0 y1 = +1; pairs counted twice
    assert kernel_target_alignment(phi, y).item() == pytest.approx(2 * 0.5 / 6)


def test_alignment_is_differentiable_and_rejects_unknown_kind():
    phi = torch.rand(10, 4, dtype=torch.float64, requires_grad=True)
    y = torch.tensor([0, 1] * 5)
    assert torch.autograd.gradcheck(lambda p: kernel_target_alignment(p, y, "centered"), (phi,))
    with pytest.raises(ConfigError, match="ustat"):
        kernel_target_alignment(phi, y, "cka")


def naive_within_class(pooled: torch.Tensor, labels: torch.Tensor) -> float:
    n = pooled.shape[0]
    total = sum(float(pooled[i] @ pooled[j]) for i in range(n) for j in range(i + 1, n) if labels[i] == labels[j])
    return total / (n * (n - 1))


@pytest.mark.parametrize("classes", [2, 3])
def test_within_class_alignment_equals_the_double_loop_and_is_differentiable(classes):
    g = torch.Generator().manual_seed(classes)
    pooled = torch.randn(9, 5, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, classes, (9,), generator=g)
    value = within_class_alignment(pooled, labels)
    assert value.item() == pytest.approx(naive_within_class(pooled.detach(), labels), rel=1e-12)
    assert torch.autograd.gradcheck(lambda p: within_class_alignment(p, labels), (pooled,))
    assert within_class_alignment(pooled, torch.arange(9)).item() == pytest.approx(0.0)  # no same-class pair
    with pytest.raises(ValueError, match="at least 2"):
        within_class_alignment(pooled[:1], labels[:1])


def test_langevin_move_reports_drift_noise_and_projection():
    omega = torch.zeros(2, 4000, 3, dtype=torch.float64)
    omega[1, :10] = 5.0  # ten particles outside the cap
    grad = torch.ones_like(omega)
    new, stats = langevin_move(omega, grad, step=0.02, beta=4.0, radius=2.0, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(stats["drift"], torch.full((2,), 0.02 * math.sqrt(3), dtype=torch.float64))
    chi_median = math.sqrt(2 * 0.02 / 4.0) * math.sqrt(3 * (1 - 2 / 27) ** 3)  # median of a chi_3, approximately
    assert stats["noise"][0].item() == pytest.approx(chi_median, rel=0.05)
    assert stats["projected_fraction"][1].item() == pytest.approx(10 / 4000)
    assert stats["norm_before_projection"][1] > stats["norm_after_projection"][1]
    assert new.norm(dim=-1).max() <= 2.0 + 1e-12
    torch.testing.assert_close(new, langevin_step(omega, grad, 0.02, 4.0, 2.0, torch.Generator().manual_seed(0)))


def naive_energy(omega: torch.Tensor, s: float, eps: float) -> float:
    m = omega.shape[0]
    total = 0.0
    for k in range(m):
        for l in range(m):
            if k != l:
                r2 = float(((omega[k] - omega[l]) ** 2).sum()) + eps**2
                total += -0.5 * math.log(r2) if s == 0 else r2 ** (-s / 2)
    return total / (2 * m * (m - 1))  # eq. 2.3: W = 1/(2N(N-1)) sum_{k != l} g_s


@pytest.mark.parametrize("s", [None, 0.0, 1.0, 2.5])
def test_riesz_energy_equals_double_loop(s):
    omega = torch.randn(7, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    expected = naive_energy(omega, 2.0 if s is None else s, 0.05)  # s=None is Coulomb, d - 2 = 2
    assert riesz_energy(omega, s, eps=0.05).item() == pytest.approx(expected, rel=1e-10)
    assert particle_potentials(omega, s, eps=0.05).mean().item() == pytest.approx(2 * expected, rel=1e-10)
    unsoftened = naive_energy(omega, 2.0 if s is None else s, 0.0)
    assert riesz_energy(omega, s).item() == pytest.approx(unsoftened, rel=1e-10)  # default: no softening


@pytest.mark.parametrize("s", [0.0, 3.0])
def test_riesz_energy_gradient_matches_finite_differences(s):
    omega = torch.randn(5, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda w: riesz_energy(w, s, eps=0.1), (omega,))


def test_riesz_energy_is_finite_for_coincident_particles_and_large_s():
    omega = torch.zeros(4, 64, dtype=torch.float64, requires_grad=True)
    energy = riesz_energy(omega, s=100.0, eps=0.1)  # every pair at r = 0: eps^-s = 1e100
    energy.backward()
    assert torch.isfinite(energy) and energy.item() == pytest.approx(1e100 / 2, rel=1e-9)
    assert torch.isfinite(omega.grad).all()
    far = torch.randn(6, 64, dtype=torch.float64) * 100
    assert torch.isfinite(riesz_energy(far, s=500.0, eps=1.0))  # underflows to 0, never nan
    with pytest.raises(ConfigError, match="softening"):
        riesz_energy(omega, s=500.0, eps=1e-3)


def test_langevin_step_without_noise_is_projected_gradient_descent():
    omega = torch.tensor([[1.0, 0.0], [0.0, 0.5]])
    grad = torch.tensor([[-10.0, 0.0], [0.0, 1.0]])
    new = langevin_step(omega, grad, step=0.1, beta=math.inf, radius=1.5)
    assert torch.allclose(new, torch.tensor([[1.5, 0.0], [0.0, 0.4]]))  # (2, 0) projected to norm 1.5


def test_langevin_noise_has_variance_two_step_over_beta():
    omega = torch.zeros(20000, 3)
    new = langevin_step(
        omega, torch.zeros_like(omega), step=0.02, beta=4.0, radius=1e9, generator=torch.Generator().manual_seed(0)
    )
    assert new.var().item() == pytest.approx(2 * 0.02 / 4.0, rel=0.03)


def signal_problem(n: int = 60, p: int = 3, seed: int = 0):
    """Labels that a frequency along x0 separates; features cos/sin of omega^T x (RBF random features)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, p, generator=g, dtype=torch.float64)
    y = (torch.sin(2.5 * x[:, 0]) > 0).long()

    def features(w: torch.Tensor) -> torch.Tensor:
        u = x @ w.transpose(-2, -1)  # (S, n, M)
        return math.sqrt(2) * torch.cat([torch.cos(u), torch.sin(u)], dim=-1)

    return features, y


def test_hamiltonian_never_increases_without_noise():
    features, y = signal_problem()
    omega = torch.randn(1, 16, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    cfg = DynamicsConfig(step=1e-3, beta=math.inf, repulsion=0.01, radius=2.0)
    _, history = align_particles(omega, [(features, y)], cfg, max_steps=40)
    hs = [row["H"] for row in history[0]]
    assert len(hs) == 40
    assert all(b <= a + 1e-12 for a, b in zip(hs, hs[1:])), hs
    assert hs[-1] < hs[0]


def test_norm_cap_always_holds():
    features, y = signal_problem()
    omega = torch.randn(2, 32, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64) * 3
    cfg = DynamicsConfig(step=0.5, beta=0.1, repulsion=1.0, radius=1.0, radius_units="absolute")
    g = torch.Generator().manual_seed(5)
    for _ in range(20):
        omega, rows = particle_step(omega, features, y, cfg, generator=g)
        assert omega.norm(dim=-1).max().item() <= 1.0 + 1e-12
        assert all(row["mean_norm"] <= 1.0 + 1e-12 for row in rows)


def test_repulsion_spreads_particles():
    features, y = signal_problem()
    start = torch.randn(1, 12, 3, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    start[0, 1] = start[0, 0] + 1e-3  # a near-coincident pair
    end = {}
    for lam in (0.0, 0.1):
        cfg = DynamicsConfig(
            step=0.01, beta=math.inf, repulsion=lam, riesz_s=1.0, softening=1e-2, radius_units="absolute", radius=10.0
        )
        omega, _ = align_particles(start, [(features, y)], cfg, max_steps=30)
        end[lam] = torch.pdist(omega[0]).min().item()
    assert end[0.1] > 10 * end[0.0]


def test_learned_particles_align_better_than_their_random_start():
    features, y = signal_problem()
    start = torch.randn(1, 32, 3, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    cfg = DynamicsConfig(step=0.05, beta=1e4, repulsion=1e-3, radius=3.0)
    omega, history = align_particles(
        start, [(features, y)], cfg, max_steps=150, generator=torch.Generator().manual_seed(8)
    )
    before = kernel_target_alignment(features(start)[0], y).item()
    after = kernel_target_alignment(features(omega)[0], y).item()
    assert history[0][0]["alignment"] == pytest.approx(before)
    assert after > before + 0.05


def test_dynamics_stop_when_particles_rest():
    features, y = signal_problem()
    omega = torch.randn(1, 8, 3, dtype=torch.float64)
    cfg = DynamicsConfig(step=1e-12, beta=math.inf, tolerance=1e-6, radius=100.0)
    _, history = align_particles(omega, [(features, y)], cfg, max_steps=50)
    assert len(history[0]) == 1


def test_resampling_keeps_distinct_particles_of_lowest_potential():
    features, y = signal_problem()
    omega = torch.randn(1, 10, 3, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    phi = features(omega)[0]
    cfg = DynamicsConfig(beta=math.inf, repulsion=0.0)
    kept = resample_particles(omega[0], phi, y, 4, cfg)
    best = torch.argsort(-particle_alignments(phi, y, 10))[:4].sort().values
    assert torch.equal(kept, omega[0, best])
    assert particle_alignments(phi, y, 10).mean().item() == pytest.approx(kernel_target_alignment(phi, y).item())
    drawn = resample_particles(
        omega[0], phi, y, 10, DynamicsConfig(), weights="gibbs", generator=torch.Generator().manual_seed(0)
    )
    assert torch.equal(drawn, omega[0])  # all 10 without replacement, in order


# --- the attention -----------------------------------------------------------------------------------


@pytest.mark.parametrize("feature_map", ["porf-softplus", "favor", "trig"])
def test_coulomb_equals_random_features_before_phase_a(feature_map):
    options = dict(head_dim=8, num_heads=2, num_features=16, seed=11, feature_map=feature_map)
    coulomb, vanilla = build_attention("coulomb", **options), build_attention("random-features", **options)
    assert torch.equal(coulomb.feature_map.omega, vanilla.feature_map.omega)
    g = torch.Generator().manual_seed(0)
    q, v = torch.randn(2, 2, 7, 8, generator=g), torch.randn(2, 2, 7, 8, generator=g)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, 4:] = False
    assert torch.equal(coulomb(q, q, v, key_padding_mask=mask), vanilla(q, q, v, key_padding_mask=mask))


def test_coulomb_particles_are_the_learning_phase_parameters_and_seeded():
    a = build_attention("coulomb", head_dim=8, num_heads=2, num_features=16, seed=5)
    b = build_attention("coulomb", head_dim=8, num_heads=2, num_features=16, seed=5)
    c = build_attention("coulomb", head_dim=8, num_heads=2, num_features=16, seed=6)
    (particles,) = a.learning_phase_parameters()
    assert isinstance(particles, torch.nn.Parameter) and particles.shape == (2, 16, 8)
    assert [p for p in a.parameters()] == [particles]
    assert torch.equal(particles, b.learning_phase_parameters()[0])
    assert not torch.equal(particles, c.learning_phase_parameters()[0])
    before = particles.detach().clone()
    a.feature_map.new_feature_map()  # particles are learned, never redrawn
    assert torch.equal(particles, before)
    caps = attention_entry("coulomb").capabilities
    assert caps.learning_phase and caps.positive_features  # the default map, porf-softplus, is positive


def test_coulomb_default_map_and_option_errors():
    assert build_attention("coulomb", head_dim=8, num_heads=1, num_features=4).feature_map.kind == "porf-softplus"
    with pytest.raises(ConfigError, match="at least 2"):
        build_attention("coulomb", head_dim=8, num_features=1)
    with pytest.raises(ConfigError, match="feature_map"):
        build_attention("coulomb", head_dim=8, feature_map="gauss")
