"""Performer / FAVOR+: unbiased kernel estimate, error falling with M, orthogonality, determinism, redraws."""

import math

import torch

from attnbench.baselines.feature_maps import FAVOR_EPS, FavorMap
from attnbench.baselines.random_projections import orthogonal_gaussian, seeded_generator
from attnbench.registry import build_attention


def naive_softmax(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def _unstabilised_estimate(q, k, omega):
    """phi(q).phi(k) with the stabilisers undone: x (d,), omega (S, M, d) -> (S,) raw FAVOR+ estimates."""
    d, m = q.shape[-1], omega.shape[1]
    s = omega.shape[0]
    xq, xk = q.expand(1, s, 1, d), k.expand(1, s, 1, d)
    favor = FavorMap(d, 1, 1)  # its scaled form, for the given omegas
    fq = favor.features(xq, is_query=True, omega=omega)[0, :, 0]  # (S, M)
    fk = favor.features(xk, is_query=False, omega=omega)[0, :, 0]
    scale = m**-0.5

    def exponent(x):  # w x' - |x'|^2 / 2 for every seed and feature: (S, M)
        return (x * d**-0.25) @ omega.transpose(-2, -1) - (x * d**-0.25).pow(2).sum() / 2

    stab_q, stab_k = exponent(q).amax(-1, keepdim=True), exponent(k).amax(-1, keepdim=True)  # one position
    raw_q = (fq / scale - FAVOR_EPS) * torch.exp(stab_q)
    raw_k = (fk / scale - FAVOR_EPS) * torch.exp(stab_k)
    return (raw_q * raw_k).sum(-1) / m


def test_favor_estimate_of_exp_qk_is_unbiased_over_seeds():
    d, m, seeds = 16, 16, 2000
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(d, generator=g, dtype=torch.float64), torch.randn(d, generator=g, dtype=torch.float64)
    q, k = 0.8 * q / q.norm() * d**0.25, 0.8 * k / k.norm() * d**0.25  # |q'| = |k'| = 0.8
    omega = torch.stack([orthogonal_gaussian(m, d, seeded_generator(s)).double() for s in range(seeds)])
    estimates = _unstabilised_estimate(q, k, omega)
    exact = math.exp(float(q @ k) / math.sqrt(d))
    standard_error = estimates.std().item() / math.sqrt(seeds)
    assert abs(estimates.mean().item() - exact) < 4 * standard_error + 1e-9
    assert standard_error < 0.02 * exact  # the check is sharp enough to catch a wrong kernel


def _relative_error(num_features, seeds=3):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 64, 16, generator=g, dtype=torch.float64) for _ in range(3))
    q, k = 0.5 * q, 0.3 * k  # moderate norms: positive features' variance grows like exp(|q' + k'|^2)
    exact = naive_softmax(q, k, v)
    errors = []
    for seed in range(seeds):
        attn = build_attention("performer", head_dim=16, num_heads=2, num_features=num_features, seed=seed)
        attn = attn.double().eval()
        errors.append(((attn(q, k, v) - exact).norm() / exact.norm()).item())
    return sum(errors) / len(errors)


def test_attention_error_against_softmax_falls_as_features_grow():
    errors = [_relative_error(m) for m in (16, 64, 256, 1024)]
    assert all(later < earlier for earlier, later in zip(errors, errors[1:])), errors
    assert errors[-1] < errors[0] / 4, errors  # Monte Carlo: error ~ M^{-1/2}
    assert errors[-1] < 0.06, errors


def test_orthogonal_blocks_are_orthogonal():
    attn = build_attention("performer", head_dim=8, num_heads=2, num_features=20, row_norms="sqrt-d")
    omega = attn.feature_map.omega
    assert omega.shape == (2, 20, 8)
    for h in range(2):
        for block in (omega[h, :8], omega[h, 8:16]):
            torch.testing.assert_close(block @ block.T, 8.0 * torch.eye(8), atol=1e-4, rtol=0)
    chi = build_attention("performer", head_dim=8, num_heads=1, num_features=8).feature_map.omega[0]
    gram = chi @ chi.T
    torch.testing.assert_close(gram - torch.diag(gram.diagonal()), torch.zeros(8, 8), atol=1e-4, rtol=0)


def test_evaluation_is_deterministic_and_training_redraws_on_schedule():
    x = torch.randn(2, 2, 10, 8)
    attn = build_attention("performer", head_dim=8, num_heads=2, num_features=32, redraw_every=2, seed=3)
    twin = build_attention("performer", head_dim=8, num_heads=2, num_features=32, redraw_every=2, seed=3)
    attn.eval()
    torch.testing.assert_close(attn(x, x, x), attn(x, x, x), rtol=0, atol=0)
    attn.train()
    omegas = []
    for _ in range(5):
        attn(x, x, x)
        omegas.append(attn.feature_map.omega.clone())
    changed = [not torch.equal(a, b) for a, b in zip(omegas, omegas[1:])]
    assert changed == [False, True, False, True]  # redrawn before training forwards 3 and 5
    attn.eval()
    first = attn(x, x, x)
    torch.testing.assert_close(attn(x, x, x), first, rtol=0, atol=0)
    assert torch.equal(attn.feature_map.omega, omegas[-1])
    twin.train()
    for _ in range(5):
        twin(x, x, x)
    assert torch.equal(twin.feature_map.omega, omegas[-1])  # redraws are seeded: same seed, same features
    assert attn.redraw_policy == "every 2 training steps"
    assert build_attention("performer", redraw_every=0).redraw_policy == "never"


def test_same_seed_same_features_different_seed_different():
    a, b, c = (build_attention("performer", head_dim=8, num_heads=2, seed=s) for s in (0, 0, 1))
    assert torch.equal(a.feature_map.omega, b.feature_map.omega)
    assert not torch.equal(a.feature_map.omega, c.feature_map.omega)
