"""Mamba-2 (SSD) in the attention slot against its recurrence worked by hand, its gate against the formula, and the
head-wise chunked form against the loop for gates from gentle to strong."""

import math

import torch
from torch import nn

from attnbench.baselines.gla.chunk import chunk_headwise_recurrence
from attnbench.baselines.gla.naive import naive_gated_recurrence
from attnbench.registry import build_attention


def fixed(a: float, dt_bias: float, causal: bool = True) -> torch.nn.Module:
    """Mamba-2 (D = 2, one head) with dt = softplus(dt_bias) fixed, A = -a, D skip 1 and gate z = x."""
    attn = build_attention("mamba2", head_dim=2, causal=causal, output_norm=False).double()
    with torch.no_grad():
        attn.decay.weight.zero_()
        attn.decay.dt_bias.fill_(dt_bias)
        attn.decay.a_log.fill_(math.log(a))
        attn.gate.copy_(torch.eye(2))
    return attn


def test_dt_and_decay_follow_the_reference_block():
    """dt = softplus(x . w + dt_bias) > 0 and log decay dt A with A = -exp(A_log) < 0, per head and position;
    at initialisation softplus(dt_bias) lies in [1e-3, 1e-1] and -A in [1, 16]."""
    attn = build_attention("mamba2", head_dim=4, num_heads=3).double()
    x = torch.randn(1, 3, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    d = attn.decay
    dt, log_gate = d(x)
    expected_dt = nn.functional.softplus(x @ d.weight.detach() + d.dt_bias.detach())
    torch.testing.assert_close(dt, expected_dt)
    torch.testing.assert_close(log_gate, -d.a_log.detach().exp() * expected_dt)
    init_dt = nn.functional.softplus(d.dt_bias.detach()).flatten()
    assert ((init_dt >= 1e-3 - 1e-12) & (init_dt <= 1e-1 + 1e-12)).all()
    assert ((d.a_log.exp() >= 1) & (d.a_log.exp() <= 16)).all()


def test_two_tokens_by_hand():
    """dt = softplus(0) = log 2, A = -1: decay exp(-log 2) = 1/2. h_1 = B_1 (dt x_1)^T; h_2 = 1/2 h_1 + B_2 (dt x_2)^T;
    y_t = h_t^T C_t + x_t (D = 1); out_t = y_t * silu(x_t) (z = x)."""
    dt = math.log(2)
    c = torch.tensor([[1.0, 0.0], [1.0, 2.0]], dtype=torch.float64)
    b = torch.tensor([[2.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    x = torch.tensor([[1.0, -1.0], [0.5, 2.0]], dtype=torch.float64)
    h1 = b[0, :, None] * (dt * x[0])[None, :]
    h2 = 0.5 * h1 + b[1, :, None] * (dt * x[1])[None, :]
    y = torch.stack([h1.T @ c[0] + x[0], h2.T @ c[1] + x[1]])
    expected = y * nn.functional.silu(x)
    out = fixed(1.0, 0.0)(c[None, None], b[None, None], x[None, None])[0, 0]
    torch.testing.assert_close(out, expected)


def test_encoder_form_weights_every_key_by_the_decay_between():
    """Non-causal: y_i = sum_j exp(-|G_i - G_j|) (C_i . B_j) dt x_j + x_i, G the cumulative log decay."""
    g = torch.Generator().manual_seed(1)
    c, b, x = (torch.randn(1, 1, 7, 2, generator=g, dtype=torch.float64) for _ in range(3))
    dt = math.log(2)
    total = -0.5 * dt * torch.arange(1, 8, dtype=torch.float64)
    decay = (-(total[:, None] - total[None, :]).abs()).exp()
    y = (c[0, 0] @ b[0, 0].T * decay) @ (dt * x[0, 0]) + x[0, 0]
    out = fixed(0.5, 0.0, causal=False)(c, b, x)[0, 0]
    torch.testing.assert_close(out, y * nn.functional.silu(x[0, 0]))


def test_headwise_chunks_match_the_loop_for_gentle_to_strong_gates():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 3, 41, 4, generator=g, dtype=torch.float64) for _ in range(3))
    start = torch.randn(2, 3, 4, 4, generator=g, dtype=torch.float64)
    for scale in (1e-3, 1.0, 100.0):  # exp(-100) per step: the per-channel form would overflow its exponents
        log_gate = -scale * torch.rand(2, 3, 41, 1, generator=g, dtype=torch.float64)
        ref_out, ref_state = naive_gated_recurrence(q, k, v, log_gate, start)
        for chunk in (1, 8, 64):
            out, state = chunk_headwise_recurrence(q, k, v, log_gate, chunk, start)
            torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(state, ref_state, rtol=1e-10, atol=1e-10)
