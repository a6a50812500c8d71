"""Nystromformer: exact softmax when every token is a landmark, any length, padding, per-matrix pinv."""

import math

import pytest
import torch

from attnbench.baselines.nystromformer import iterative_pinv, sequence_conv
from attnbench.errors import ConfigError
from attnbench.registry import build_attention


def naive_softmax(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def naive_nystrom(q, k, v, n_real, num_landmarks):
    """One (batch, head), real tokens only: loops for the segment means, exact pinv (torch.linalg.pinv)."""
    d = q.shape[-1]
    q, k, v = q[:n_real] * d**-0.25, k[:n_real] * d**-0.25, v[:n_real]
    bounds = [math.ceil(l * n_real / num_landmarks) for l in range(num_landmarks + 1)]
    segments = [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]
    q_land = torch.stack([q[lo:hi].mean(0) for lo, hi in segments])
    k_land = torch.stack([k[lo:hi].mean(0) for lo, hi in segments])
    kernel_1 = torch.softmax(q @ k_land.T, -1)
    kernel_2 = torch.softmax(q_land @ k_land.T, -1)
    kernel_3 = torch.softmax(q_land @ k.T, -1)
    return kernel_1 @ torch.linalg.pinv(kernel_2) @ kernel_3 @ v


def _inputs(n, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(2, 2, n, 8, generator=g, dtype=torch.float64) for _ in range(3)]


def test_landmarks_equal_to_length_is_exact_softmax():
    q, k, v = _inputs(12)
    mask = torch.tensor([[True] * 12, [True] * 7 + [False] * 5])
    attn = build_attention(
        "nystromformer", head_dim=8, num_heads=2, num_landmarks=12, conv_kernel=0, pinv_iterations=40
    ).double()
    torch.testing.assert_close(attn(q, k, v), naive_softmax(q, k, v))
    out = attn(q, k, v, key_padding_mask=mask)
    expected = naive_softmax(q, k, v, mask)
    torch.testing.assert_close(out[0], expected[0])
    torch.testing.assert_close(out[1, :, :7], expected[1, :, :7])


def test_default_six_iterations_reach_softmax_on_well_conditioned_attention():
    g = torch.Generator().manual_seed(0)
    q = 3 * torch.eye(16, dtype=torch.float64) + 0.1 * torch.randn(2, 2, 16, 16, generator=g, dtype=torch.float64)
    v = torch.randn(2, 2, 16, 16, generator=g, dtype=torch.float64)  # q = k near-orthogonal: condition number ~ 3
    attn = build_attention("nystromformer", head_dim=16, num_heads=2, num_landmarks=16, conv_kernel=0).double()
    torch.testing.assert_close(attn(q, q, v), naive_softmax(q, q, v), atol=1e-4, rtol=0)


@pytest.mark.parametrize("n, landmarks", [(50, 8), (10, 4), (7, 3)])
def test_lengths_not_divisible_by_landmarks_match_naive_nystrom(n, landmarks):
    q, k, v = _inputs(n, scale=2.0, seed=n)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, n - 3 :] = False
    attn = build_attention(
        "nystromformer", head_dim=8, num_heads=2, num_landmarks=landmarks, conv_kernel=0, pinv_iterations=60
    ).double()
    out = attn(q, k, v, key_padding_mask=mask)
    for b in range(2):
        n_real = int(mask[b].sum())
        for h in range(2):
            expected = naive_nystrom(q[b, h], k[b, h], v[b, h], n_real, landmarks)
            torch.testing.assert_close(out[b, h, :n_real], expected, atol=1e-6, rtol=1e-6)


def test_padded_sequence_equals_the_unpadded_one_with_convolution():
    q, k, v = _inputs(40, seed=5)
    mask = torch.ones(2, 40, dtype=torch.bool)
    mask[1, 23:] = False
    attn = build_attention("nystromformer", head_dim=8, num_heads=2, num_landmarks=8).double()
    assert attn.conv is not None and attn.conv.weight.shape == (2, 1, 33, 1)
    padded = attn(q, k, v, key_padding_mask=mask)[1, :, :23]
    alone = attn(q[1:, :, :23], k[1:, :, :23], v[1:, :, :23])[0]
    torch.testing.assert_close(padded, alone)


def test_pinv_initialisation_is_per_matrix():
    g = torch.Generator().manual_seed(0)
    small = torch.softmax(3 * torch.randn(6, 6, generator=g, dtype=torch.float64), -1)
    large = 1000 * torch.softmax(3 * torch.randn(6, 6, generator=g, dtype=torch.float64), -1)
    batch = torch.stack([small, large])
    approx = iterative_pinv(batch, iterations=12)
    torch.testing.assert_close(approx, torch.linalg.pinv(batch), rtol=1e-6, atol=1e-9)


CONV_CASES = [
    (n, size, dtype, width)
    for n, size in [(1, 3), (70, 33), (200, 5), (64, 33)]
    for dtype, width in [(torch.float64, 4), (torch.float32, 16)]
]  # float32, width 16: the fused kernel


def _conv_inputs(n, size, dtype, width, requires_grad=False):
    g = torch.Generator().manual_seed(n)
    v = torch.randn(2, 3, n, width, generator=g, dtype=dtype, requires_grad=requires_grad)
    conv = torch.nn.Conv2d(3, 3, (size, 1), padding=(size // 2, 0), groups=3, bias=False).to(dtype)
    return g, v, conv


@pytest.mark.parametrize("n, size, dtype, width", CONV_CASES)
def test_sequence_conv_equals_torch_depthwise_convolution(n, size, dtype, width):
    g, v, conv = _conv_inputs(n, size, dtype, width)
    expected = conv(v)
    torch.testing.assert_close(sequence_conv(v, conv.weight[:, 0, :, 0]), expected)
    base = torch.randn(2, 3, n, width, generator=g, dtype=dtype)
    with torch.no_grad():  # accumulated into an existing output (blocks of 16 dividing n, or not)
        torch.testing.assert_close(sequence_conv(v, conv.weight[:, 0, :, 0], out=base.clone()), base + expected)


@pytest.mark.parametrize("n, size, dtype, width", CONV_CASES)
def test_sequence_conv_gradients_equal_torch_depthwise_convolution(n, size, dtype, width):
    """The hand-written backward (transposed convolution for v, diagonal sums for the taps) against autograd
    through nn.Conv2d."""
    g, v, conv = _conv_inputs(n, size, dtype, width, requires_grad=True)
    upstream = torch.randn(2, 3, n, width, generator=g, dtype=dtype)
    expected = torch.autograd.grad(conv(v), (v, conv.weight), upstream)
    weight = conv.weight[:, 0, :, 0]
    got = torch.autograd.grad(sequence_conv(v, weight), (v, conv.weight), upstream)
    torch.testing.assert_close(got[0], expected[0])
    # the taps' gradients sum n * batch * width products: float32 rounds them relative to the largest
    scale = {} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-5 * expected[1].abs().max().item()}
    torch.testing.assert_close(got[1], expected[1], **scale)


def test_unpadded_fast_landmarks_equal_the_masked_route():
    q, k, v = _inputs(64, seed=2)
    attn = build_attention("nystromformer", head_dim=8, num_heads=2, num_landmarks=8).double()
    everything_real = torch.ones(2, 64, dtype=torch.bool)
    torch.testing.assert_close(attn(q, k, v), attn(q, k, v, key_padding_mask=everything_real))


def test_cost_counts_the_products_that_dominate():
    attn = build_attention("nystromformer", head_dim=64, num_heads=4, num_landmarks=64)
    cost = attn.cost(1, 4, 4096, 64)
    products = 4 * 4 * 2.0 * 4096 * 64 * 64  # per head: q K~^T, Q~ k^T, kernel_3 v and kernel_1 (pinv kernel_3 v)
    assert products < cost["flops"] < 1.5 * products
    assert cost["bytes"] == 4 * 4.0 * 4 * 4096 * 64


@pytest.mark.parametrize("n, landmarks", [(64, 8), (50, 8), (9, 4)])
def test_blockwise_inference_equals_the_differentiable_route(monkeypatch, n, landmarks):
    """Without gradients the products run over blocks of 4 rows (running maxima); padding-only blocks
    and a sequence of padding only included."""
    import attnbench.baselines.nystromformer as nystromformer

    monkeypatch.setattr(nystromformer, "chunk_rows", lambda q, m: 4)
    q, k, v = _inputs(n, scale=3.0, seed=n)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, 2:] = False
    attn = build_attention("nystromformer", head_dim=8, num_heads=2, num_landmarks=landmarks).double()
    for m in (None, mask, torch.zeros(2, n, dtype=torch.bool)):
        expected = attn(q, k, v, key_padding_mask=m)
        with torch.no_grad():
            torch.testing.assert_close(attn(q, k, v, key_padding_mask=m), expected)


def test_a_convolution_built_for_other_head_counts_names_num_heads():
    attn = build_attention("nystromformer", head_dim=16, num_heads=2, num_landmarks=16).eval()
    q = torch.randn(1, 4, 32, 16)
    with pytest.raises(ConfigError, match="num_heads=2 but called on 4 heads"):
        attn(q, q, q)
    no_conv = build_attention("nystromformer", head_dim=16, num_heads=2, num_landmarks=16, conv_kernel=0).eval()
    assert no_conv(q, q, q).shape == q.shape  # no per-head parameters: any head count
