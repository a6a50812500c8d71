"""GLA against its recurrence worked by hand, and its gate against the paper's formula."""

import math

import pytest
import torch

from attnbench.errors import ConfigError
from attnbench.registry import build_attention


def test_gate_is_a_tempered_sigmoid_of_a_low_rank_projection_of_the_key():
    attn = build_attention("gla", head_dim=4, num_heads=2, gate_rank=2, gate_temperature=16.0).double()
    k = torch.randn(1, 2, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    logits = torch.einsum("bhnd,hdr,hre->bhne", k, attn.gate_down.detach(), attn.gate_up.detach())
    alpha = torch.sigmoid(logits + attn.gate_bias.detach()) ** (1 / 16)
    torch.testing.assert_close(attn.log_gate(k).exp(), alpha)
    assert attn.gate_down.shape == (2, 4, 2) and attn.gate_up.shape == (2, 2, 4)


def test_two_tokens_by_hand_with_fixed_gates():
    """Gates fixed through the bias (W1 W2 = 0): alpha = (sigmoid(0), sigmoid(1)) = (1/2, 0.731) with tau = 1.
    S_1 = k_1 v_1^T; S_2 = diag(alpha) S_1 + k_2 v_2^T; o_t = S_t^T q_t / sqrt(2)."""
    attn = build_attention("gla", head_dim=2, causal=True, output_norm=False, gate_temperature=1.0).double()
    with torch.no_grad():
        attn.gate_down.zero_()
        attn.gate_bias.copy_(torch.tensor([[[0.0, 1.0]]]))
    a = 1 / (1 + math.exp(-1.0))
    k = torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=torch.float64)
    v = torch.tensor([[3.0, -1.0], [1.0, 1.0]], dtype=torch.float64)
    q = torch.tensor([[1.0, 1.0], [2.0, -1.0]], dtype=torch.float64)
    s1 = [[1 * 3, 1 * -1], [2 * 3, 2 * -1]]  # k_1 v_1^T
    s2 = [[0.5 * s1[0][0] + 0 * 1, 0.5 * s1[0][1] + 0 * 1], [a * s1[1][0] + 1 * 1, a * s1[1][1] + 1 * 1]]
    expected = [
        [(1 * s1[0][c] + 1 * s1[1][c]) / math.sqrt(2) for c in range(2)],
        [(2 * s2[0][c] - 1 * s2[1][c]) / math.sqrt(2) for c in range(2)],
    ]
    out = attn(q[None, None], k[None, None], v[None, None])[0, 0]
    torch.testing.assert_close(out, torch.tensor(expected, dtype=torch.float64))


def test_gates_are_floored_so_the_chunked_form_stays_finite():
    attn = build_attention("gla", head_dim=4, causal=True)
    with torch.no_grad():
        attn.gate_bias.fill_(-1e4)  # gates of exp(-625) without the floor
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, 40, 4, generator=g) for _ in range(3))
    assert torch.isfinite(attn(q, k, v)).all()


def test_step_needs_the_causal_form():
    with pytest.raises(ConfigError, match="causal=True"):
        build_attention("gla", head_dim=4).init_state(2)


def test_a_temperature_that_floors_the_gates_is_refused_and_the_least_one_learns():
    """gate_temperature 0.001 (the old minimum) put every gate at its floor, with no gradient: `attnbench check`
    flagged it, validation did not. At the least temperature now, a gate at logit 0 is above the floor and learns."""
    with pytest.raises(
        ConfigError, match=r"'gate_temperature' of attention 'gla' is 0.001, outside its bounds \(at least 0.15\)"
    ):
        build_attention("gla", head_dim=4, gate_temperature=0.001)
    attn = build_attention("gla", head_dim=4, causal=True, gate_temperature=0.15)
    with torch.no_grad():
        attn.gate_down.zero_()
        attn.gate_bias.zero_()  # every logit 0: log alpha = -log(2) / 0.15 = -4.62, above the floor of -5
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 1, 12, 4, generator=g) for _ in range(3))
    attn(q, k, v).square().sum().backward()
    assert attn.gate_bias.grad.abs().min() > 0
