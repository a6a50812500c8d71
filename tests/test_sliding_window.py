"""Sliding-window attention against fla-core's reference (fla/ops/forgetting_attn/naive.py with g = 0 and a window)
in float64, against torch's masked softmax where fla's reference has no form (padding, the encoder's symmetric
window), against softmax when the window covers the sequence, and its ring buffer."""

import pytest
import torch
from fla_naive import in_float64, load_naive, oracle_name
from recurrent_forms import prefilled_state_bytes

from attnbench.recurrence import step_through
from attnbench.registry import build_attention

OP = "forgetting_attn"
B, H, N, D = 2, 3, 29, 8
WINDOWS = [1, 4, 16, 64]


def swa(window: int, causal: bool = True, **options) -> torch.nn.Module:
    return build_attention("sliding-window", head_dim=D, num_heads=H, window=window, causal=causal, **options).double()


def inputs(seed: int = 0, n: int = N) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, D, generator=g, dtype=torch.float64) for _ in range(3)]


def masked_softmax(q, k, v, window: int, causal: bool, mask=None):
    """Dense float64 softmax over the band (causal: i - w < j <= i; encoder: |i - j| < w) and the real keys."""
    n = q.shape[2]
    distance = torch.arange(n)[:, None] - torch.arange(n)
    band = (distance >= 0) & (distance < window) if causal else distance.abs() < window
    allowed = band if mask is None else band & mask[:, None, None, :]
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


@pytest.mark.parametrize("window", WINDOWS)
def test_causal_window_equals_fla_forgetting_attention_without_gates(window):
    attn, (q, k, v) = swa(window), inputs()
    g = torch.zeros(B, N, H, dtype=torch.float64)
    expected = in_float64(
        load_naive(OP).naive_forgetting_attn, *(x.transpose(1, 2) for x in (q, k, v)), g, window_size=window
    ).transpose(1, 2)
    error = float((attn(q, k, v) - expected).abs().max())
    assert error < 1e-12, f"{oracle_name(OP)} (g = 0, window_size={window}): max float64 difference {error:.3g}"
    torch.testing.assert_close(step_through(attn, q, k, v)[0], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "encoder"])
@pytest.mark.parametrize("window", WINDOWS)
def test_padded_window_equals_a_dense_masked_softmax(window, causal):
    """Padding inside and at the end of a sequence: padded positions count in the window but are never read."""
    attn, (q, k, v) = swa(window, causal), inputs(seed=1)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, [2, 3, 9, 17]] = False
    mask[1, 21:] = False
    expected = masked_softmax(q, k, v, window, causal, mask)
    real = mask[:, None, :, None].expand(B, H, N, D)
    torch.testing.assert_close(attn(q, k, v, key_padding_mask=mask)[real], expected[real], rtol=1e-12, atol=1e-12)
    if causal:
        stepped = step_through(attn, q, k, v, mask)[0]
        torch.testing.assert_close(stepped[real], expected[real], rtol=1e-12, atol=1e-12)


def test_encoder_window_is_symmetric():
    """Encoder, window 2: query 4 reads keys 3, 4, 5 and no other."""
    attn, (q, k, v) = swa(2, causal=False), inputs(seed=2, n=9)
    out = attn(q, k, v)[:, :, 4]
    scores = torch.einsum("bhd,bhjd->bhj", q[:, :, 4], k[:, :, 3:6]) / D**0.5
    torch.testing.assert_close(out, torch.einsum("bhj,bhjd->bhd", torch.softmax(scores, -1), v[:, :, 3:6]))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "encoder"])
@pytest.mark.parametrize("window", [N, N + 7, 1000])
def test_a_window_as_long_as_the_sequence_is_softmax_attention(window, causal):
    attn, (q, k, v) = swa(window, causal), inputs(seed=3)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(attn(q, k, v), expected, rtol=1e-12, atol=1e-12)


def test_ring_buffer_state_is_flat_and_prefill_matches_steps():
    attn, (q, k, v) = swa(8, short_conv=3), inputs(seed=4)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, :4] = False
    sizes = set(prefilled_state_bytes(attn, q, k, v, mask, (3, 8, 20, N)).values())
    assert sizes == {B * attn.state_size(N, torch.float64)}
    assert attn.state_size(16) == attn.state_size(16384)


def test_window_of_one_returns_each_value():
    attn, (q, k, v) = swa(1), inputs(seed=5)
    torch.testing.assert_close(attn(q, k, v), v)
    torch.testing.assert_close(step_through(attn, q, k, v)[0], v)
