"""ELU linear attention against phi(Q)(phi(K)^T V) / (phi(Q) sum phi(K)) computed the slow way."""

import math

import pytest
import torch

from attnbench.registry import build_attention


def phi(x):
    return [[math.exp(t) if t <= 0 else t + 1 for t in row] for row in x.tolist()]


def slow_elu_linear(q, k, v, n_real, causal=False, eps=1e-6):
    """One (batch, head) with explicit Python loops over positions and features."""
    fq, fk, vals = phi(q), phi(k), v.tolist()
    out = []
    for i in range(len(fq)):
        keys = range(min(n_real, i + 1) if causal else n_real)
        weights = [sum(a * b for a, b in zip(fq[i], fk[j])) for j in keys]
        norm = sum(weights) + 0.0
        out.append([sum(w * vals[j][c] for w, j in zip(weights, keys)) / max(norm, eps) for c in range(len(vals[0]))])
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("causal", [False, True])
def test_elu_linear_matches_slow_formula_with_padding(causal):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    attn = build_attention("elu-linear", head_dim=4, num_heads=2, causal=causal)
    out = attn(q, k, v, key_padding_mask=mask)
    for b in range(2):
        for h in range(2):
            expected = slow_elu_linear(q[b, h], k[b, h], v[b, h], int(mask[b].sum()), causal)
            n = int(mask[b].sum())
            torch.testing.assert_close(out[b, h, :n], expected[:n])
            if not causal:
                torch.testing.assert_close(out[b, h], expected)


def test_elu_linear_has_no_parameters_and_rejects_bad_eps():
    assert list(build_attention("elu-linear", head_dim=4).parameters()) == []
    with pytest.raises(ValueError, match="eps=0"):
        build_attention("elu-linear", eps=0.0)


def test_elu_plus_one_matches_torch_elu_in_value_and_gradient():
    """The output-only backward, d phi / du = min(phi, 1), against autograd through torch's elu."""
    from attnbench.baselines.feature_maps import elu_plus_one

    points = [-30.0, -2.0, -1e-3, 0.0, 1e-3, 0.5, 4.0]
    u = torch.tensor(points, dtype=torch.float64, requires_grad=True)
    u_ref = torch.tensor(points, dtype=torch.float64, requires_grad=True)
    ours, reference = elu_plus_one(u), torch.nn.functional.elu(u_ref) + 1
    torch.testing.assert_close(ours, reference)
    grad = torch.linspace(-1, 2, len(points), dtype=torch.float64)
    ours.backward(grad)
    reference.backward(grad)
    torch.testing.assert_close(u.grad, u_ref.grad)
    assert torch.autograd.gradcheck(
        elu_plus_one, (torch.tensor([-2.0, -1e-3, 1e-3, 0.5], dtype=torch.float64, requires_grad=True),)
    )
