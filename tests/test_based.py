"""BASED against its definition worked by hand: the Taylor kernel, the window, and the softmax limit."""

import math

import torch

from attnbench.baselines.based.feature_map import TaylorFeatureMap
from attnbench.registry import build_attention


def test_taylor_features_give_the_second_order_expansion_of_exp():
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(7, 16, generator=g, dtype=torch.float64) for _ in range(2))
    phi = TaylorFeatureMap(16)
    s = (x * y).sum(-1) / 4.0  # x . y / sqrt(16)
    torch.testing.assert_close((phi(x) * phi(y)).sum(-1), 1 + s + s * s / 2)
    assert phi(x).shape == (7, 1 + 16 + 256) == (7, phi.num_features)


def identity_based(window: int, causal: bool = True) -> torch.nn.Module:
    attn = build_attention("based", head_dim=2, feature_dim=2, window=window, causal=causal).double()
    with torch.no_grad():
        attn.project_q.copy_(torch.eye(2))
        attn.project_k.copy_(torch.eye(2))
    return attn


def test_three_tokens_with_a_window_of_one_by_hand():
    """Window 1 (causal): the query's own key weighs exp(s_ii), earlier keys 1 + s + s^2/2; one normaliser."""
    q = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], dtype=torch.float64)
    k = torch.tensor([[2.0, 0.0], [1.0, -1.0], [0.0, 1.0]], dtype=torch.float64)
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]], dtype=torch.float64)
    out = identity_based(window=1)(q[None, None], k[None, None], v[None, None])[0, 0]

    def s(i, j):
        return float(q[i] @ k[j]) / math.sqrt(2)

    def taylor(x):
        return 1 + x + x * x / 2

    weights = [math.exp(s(2, 2)), taylor(s(2, 0)), taylor(s(2, 1))]
    keys = [2, 0, 1]
    expected = [sum(w * float(v[j, c]) for w, j in zip(weights, keys)) / sum(weights) for c in range(2)]
    torch.testing.assert_close(out[2], torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(out[0], v[0])  # alone in its window


def test_a_window_as_long_as_the_sequence_is_softmax_attention():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 1, 11, 2, generator=g, dtype=torch.float64) for _ in range(3))
    for causal in (True, False):
        attn = identity_based(window=11, causal=causal)
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.testing.assert_close(attn(q, k, v), expected)


def test_encoder_window_reaches_both_sides():
    """Encoder, window 2: query 1 sees keys 0, 1, 2 exactly and key 3 through the Taylor kernel."""
    q = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [3.0, 0.0]], dtype=torch.float64)
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 2.0], [-1.0, 3.0]], dtype=torch.float64)
    attn = identity_based(window=2, causal=False)
    out = attn(q[None, None], k[None, None], v[None, None])[0, 0, 1]
    scores = [float(k[j, 0]) / math.sqrt(2) for j in range(4)]
    weights = [math.exp(scores[0]), math.exp(scores[1]), math.exp(scores[2]), 1 + scores[3] + scores[3] ** 2 / 2]
    expected = sum(w * v[j] for j, w in enumerate(weights)) / sum(weights)
    torch.testing.assert_close(out, expected)
