"""RFA: sin/cos features of unit-normalised inputs, learned per-head scale, resampling only in training."""

import math

import pytest
import torch

from attnbench.registry import attention_entry, build_attention


def test_features_match_the_definition():
    attn = build_attention("rfa", head_dim=4, num_heads=2, num_features=5, tau=2.0).double().eval()
    fmap = attn.feature_map
    with torch.no_grad():
        fmap.sigma.copy_(torch.tensor([0.5, 3.0]))
    x = torch.randn(1, 2, 3, 4, dtype=torch.float64)
    phi = fmap.forward_queries(x)
    assert phi.shape == (1, 2, 3, 10)
    for h in range(2):
        for n in range(3):
            unit = x[0, h, n] / (x[0, h, n].norm() + 1e-3)
            u = [float(fmap.sigma[h].detach()) * float(w @ unit) / 2.0 for w in fmap.omega[h]]
            expected = [math.sin(t) for t in u] + [math.cos(t) for t in u]
            torch.testing.assert_close(phi[0, h, n], torch.tensor(expected, dtype=torch.float64) / math.sqrt(5))


def test_features_estimate_gaussian_kernel_of_unit_vectors():
    attn = build_attention("rfa", head_dim=8, num_heads=1, num_features=20000).double().eval()
    x = torch.randn(1, 1, 4, 8, dtype=torch.float64)
    phi = attn.feature_map.forward_queries(x)[0, 0]
    unit = x[0, 0] / (x[0, 0].norm(dim=-1, keepdim=True) + 1e-3)
    exact = torch.exp(-torch.cdist(unit, unit).pow(2) / 2)  # sigma = tau = 1
    torch.testing.assert_close(phi @ phi.T, exact, atol=0.03, rtol=0)


def test_resampled_in_training_fixed_in_evaluation():
    x = torch.randn(2, 2, 6, 8)
    attn = build_attention("rfa", head_dim=8, num_heads=2, seed=1)
    attn.eval()
    first = attn(x, x, x)
    attn.train()
    a, b, c = attn(x, x, x), attn(x, x, x), attn(x, x, x)
    assert not torch.allclose(b, c) and not torch.allclose(a, b)
    attn.eval()
    torch.testing.assert_close(attn(x, x, x), first, rtol=0, atol=0)  # evaluation keeps the first draw
    fixed = build_attention("rfa", head_dim=8, num_heads=2, seed=1, resample=False)
    torch.testing.assert_close(fixed(x, x, x), fixed(x, x, x), rtol=0, atol=0)


def test_sigma_is_a_learned_per_head_parameter():
    attn = build_attention("rfa", head_dim=8, num_heads=3)
    assert [name for name, _ in attn.named_parameters()] == ["feature_map.sigma"]
    assert torch.equal(attn.feature_map.sigma.detach(), torch.ones(3))
    x = torch.randn(1, 3, 5, 8)
    attn(x, x, x).square().sum().backward()
    assert attn.feature_map.sigma.grad is not None and (attn.feature_map.sigma.grad != 0).all()
    assert attention_entry("rfa").capabilities.positive_features is False


@pytest.mark.parametrize("threads", [1, 2])
def test_sin_cos_into_a_buffer_equals_the_concatenation(threads):
    """[sin u, cos u] written strided (one thread) or through contiguous scratch (several), and with gradients."""
    from attnbench.baselines.feature_maps import sin_cos

    torch.set_num_threads(threads)  # the autouse fixture restores one thread
    u = torch.randn(2, 3, 17, 5, dtype=torch.float64)
    expected = torch.cat([torch.sin(u), torch.cos(u)], dim=-1)
    with torch.no_grad():
        torch.testing.assert_close(sin_cos(u, torch.empty(2, 3, 17, 10, dtype=torch.float64)), expected)
        torch.testing.assert_close(sin_cos(u), expected)
    torch.testing.assert_close(sin_cos(u.clone().requires_grad_()).detach(), expected)
