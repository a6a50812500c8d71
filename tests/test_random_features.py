"""Vanilla random-feature maps: definitions, kernel estimates, fixed seeded omegas, config checks."""
import math

import pytest
import torch

from baselines.random_features import (FEATURE_MAPS, RandomFeatureMap, feature_values, orthogonal_gaussian,
                                       seeded_generator)
from harness.errors import ConfigError
from harness.registry import build_attention

NAIVE = {  # f(u) per PAPER.md, one scalar at a time
    "elu": lambda u: u + 1 if u > 0 else math.exp(u),
    "softplus": lambda u: math.log1p(math.exp(u)),
    "porf-softplus": lambda u: math.log1p(math.exp(u)),
    "sigmoid2": lambda u: (1 / (1 + math.exp(-u))) ** 2,
    "cos2": lambda u: math.cos(u) ** 2,
}


@pytest.mark.parametrize("kind", sorted(NAIVE))
def test_elementwise_maps_match_their_definition(kind):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 3, 4, generator=g, dtype=torch.float64)
    omega = torch.randn(2, 5, 4, generator=g, dtype=torch.float64)
    phi = feature_values(kind, x, omega, is_query=True)
    for h in range(2):
        for n in range(3):
            for k in range(5):
                u = float(omega[h, k] @ x[0, h, n]) * 4 ** -0.25
                assert phi[0, h, n, k].item() == pytest.approx(NAIVE[kind](u) / math.sqrt(5), rel=1e-10)


def test_softmaxfeat_and_trig_match_their_definition():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 1, 3, 4, generator=g, dtype=torch.float64)
    omega = torch.randn(1, 6, 4, generator=g, dtype=torch.float64)
    u = (x[0, 0] * 4 ** -0.25) @ omega[0].T
    soft = feature_values("softmaxfeat", x, omega, is_query=False)[0, 0]
    trig = feature_values("trig", x, omega, is_query=False)[0, 0]
    expected_soft = torch.stack([torch.exp(r) / torch.exp(r).sum() for r in u]) / math.sqrt(6)
    torch.testing.assert_close(soft, expected_soft)
    torch.testing.assert_close(trig, torch.cat([u.sin(), u.cos()], dim=-1) / math.sqrt(6))


def test_favor_features_estimate_softmax_kernel_up_to_stabiliser():
    """favor: phi(q).phi(k) * exp(stabilisers) ~ exp(q.k / sqrt(d)); check the un-stabilised ratio over keys."""
    torch.manual_seed(0)
    d, m = 8, 20000
    q, k = 0.5 * torch.randn(1, 1, 1, d, dtype=torch.float64), 0.5 * torch.randn(1, 1, 6, d, dtype=torch.float64)
    omega = torch.randn(1, m, d, dtype=torch.float64)
    phi_q, phi_k = feature_values("favor", q, omega, is_query=True), feature_values("favor", k, omega, is_query=False)
    estimate = (phi_q @ phi_k.transpose(-1, -2))[0, 0, 0]
    exact = torch.exp(q[0, 0] @ k[0, 0].T / math.sqrt(d))[0]
    torch.testing.assert_close(estimate / estimate.sum(), exact / exact.sum(), rtol=0.03, atol=0)


def test_trig_features_estimate_gaussian_kernel():
    torch.manual_seed(0)
    d, m = 8, 20000
    x, y = 0.5 * torch.randn(1, 1, 1, d, dtype=torch.float64), 0.5 * torch.randn(1, 1, 4, d, dtype=torch.float64)
    omega = torch.randn(1, m, d, dtype=torch.float64)
    phi_x, phi_y = feature_values("trig", x, omega, is_query=True), feature_values("trig", y, omega, is_query=False)
    estimate = (phi_x @ phi_y.transpose(-1, -2))[0, 0, 0]
    exact = torch.exp(-((x - y) * d ** -0.25).pow(2).sum(-1) / 2)[0, 0]
    torch.testing.assert_close(estimate, exact, atol=0.03, rtol=0)


def test_favor_key_stabiliser_ignores_padded_positions():
    torch.manual_seed(0)
    omega = torch.randn(2, 16, 8)
    x = torch.randn(1, 2, 5, 8)
    mask = torch.tensor([[True, True, True, False, False]])
    loud = x.clone()
    loud[:, :, 3:] = 50.0  # huge padded keys would dominate an unmasked max
    a = feature_values("favor", x, omega, is_query=False, key_padding_mask=mask)[:, :, :3]
    b = feature_values("favor", loud, omega, is_query=False, key_padding_mask=mask)[:, :, :3]
    torch.testing.assert_close(a, b)


def test_orthogonal_gaussian_blocks_are_orthogonal_with_requested_norms():
    g = torch.Generator().manual_seed(0)
    w = orthogonal_gaussian(20, 8, g, scaling="sqrt-d")
    assert w.shape == (20, 8)
    for block in (w[:8], w[8:16]):
        torch.testing.assert_close(block @ block.T, 8.0 * torch.eye(8), atol=1e-4, rtol=0)
    chi = orthogonal_gaussian(4096, 16, g, scaling="chi").norm(dim=1)
    assert abs(chi.pow(2).mean().item() - 16) < 1.0  # E|g|^2 = d for Gaussian rows
    assert chi.std() > 0.1


def test_seed_fixes_omegas_per_head_and_they_are_buffers():
    a = RandomFeatureMap(8, 3, 16, "elu", seed=5)
    b = RandomFeatureMap(8, 3, 16, "elu", seed=5)
    c = RandomFeatureMap(8, 3, 16, "elu", seed=6)
    torch.testing.assert_close(a.omega, b.omega)
    assert not torch.allclose(a.omega, c.omega)
    assert not torch.allclose(a.omega[0], a.omega[1])
    assert a.omega.shape == (3, 16, 8) and list(a.parameters()) == [] and "omega" in a.state_dict()
    assert torch.equal(torch.randn(3, generator=seeded_generator(1, 2)),
                       torch.randn(3, generator=seeded_generator(1, 2)))


@pytest.mark.parametrize("kind", FEATURE_MAPS)
def test_attention_matches_naive_normalised_kernel(kind):
    torch.manual_seed(0)
    attn = build_attention("random-features", head_dim=8, num_heads=2, feature_map=kind, num_features=16, seed=1)
    q, k, v = (torch.randn(2, 2, 6, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    out = attn.double()(q, k, v, key_padding_mask=mask)
    fq = feature_values(kind, q, attn.feature_map.omega, is_query=True)
    fk = feature_values(kind, k, attn.feature_map.omega, is_query=False, key_padding_mask=mask)
    for b in range(2):
        for h in range(2):
            n = int(mask[b].sum())
            weights = fq[b, h] @ fk[b, h, :n].T  # (6, n), naive n x n
            expected = (weights @ v[b, h, :n]) / weights.sum(-1, keepdim=True)
            torch.testing.assert_close(out[b, h], expected)
    assert attn.feature_map.positive == (kind != "trig")
    assert attn.feature_map.num_features == (32 if kind == "trig" else 16)


def test_config_errors_are_clear():
    with pytest.raises(ConfigError, match="did you mean 'softplus'"):
        build_attention("random-features", feature_map="softplu")
    with pytest.raises(ConfigError, match="num_features=0"):
        build_attention("random-features", num_features=0)
