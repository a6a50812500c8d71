"""Gated DeltaNet against its recurrence worked by hand, its gate against Mamba-2's formula, and its limits: no decay
is DeltaNet; the chunked WY form with strong gates from a given state is the token loop."""

import math

import pytest
import torch
from torch import nn

from attnbench.baselines.deltanet.chunk import chunk_delta_rule
from attnbench.baselines.deltanet.naive import naive_delta_rule
from attnbench.recurrence import state_bytes
from attnbench.registry import attention_capabilities, build_attention


def gated(a_log: float, dt_bias: float, beta_bias: float, **options) -> torch.nn.Module:
    """Gated DeltaNet (D = 2) whose gate and beta are fixed through their biases: dt = softplus(dt_bias)."""
    attn = build_attention("gated-deltanet", head_dim=2, causal=True, output_norm=False, **options).double()
    with torch.no_grad():
        attn.beta_weight.zero_()
        attn.beta_bias.fill_(beta_bias)
        attn.decay.weight.zero_()
        attn.decay.dt_bias.fill_(dt_bias)
        attn.decay.a_log.fill_(a_log)
    return attn


def test_gate_is_mamba2s_decay_of_the_raw_key():
    """g = -exp(A_log) softplus(k . w_a + dt_bias), per head, from the key before its L2 norm."""
    attn = build_attention("gated-deltanet", head_dim=4, num_heads=2).double()
    k = torch.randn(1, 2, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    d = attn.decay
    expected = -d.a_log.detach().exp() * nn.functional.softplus(k @ d.weight.detach() + d.dt_bias.detach())
    torch.testing.assert_close(attn.gated_inputs(k, k, k, None)[4], expected[..., 0])


def test_two_tokens_by_hand():
    """alpha = exp(-A dt), A = 1, dt = softplus(0) = log 2: alpha = 1/2; beta = sigmoid(0) = 1/2; k = e1 twice.
    S_1 = 1/2 e1 v_1^T; S_2 = alpha S_1 + 1/2 e1 (v_2 - alpha S_1^T e1)^T; o_t = S_t^T q_t / sqrt(2)."""
    k = torch.tensor([[3.0, 0.0], [0.5, 0.0]], dtype=torch.float64)  # both normalise to e1
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    q = torch.tensor([[2.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    s1 = [0.5 * 1.0, 0.5 * 2.0]
    kept = [0.5 * s1[0], 0.5 * s1[1]]
    s2 = [kept[0] + 0.5 * (3.0 - kept[0]), kept[1] + 0.5 * (4.0 - kept[1])]
    expected = torch.tensor([s1, s2], dtype=torch.float64) / math.sqrt(2)
    out = gated(a_log=0.0, dt_bias=0.0, beta_bias=0.0)(q[None, None], k[None, None], v[None, None])[0, 0]
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("options", [{}, {"allow_neg_eigval": True}], ids=["beta<1", "negative-eigenvalues"])
def test_without_decay_it_is_deltanet(options):
    """A -> 0 makes alpha = 1 to float64: the outputs are DeltaNet's with the same beta (both doubled with
    `allow_neg_eigval`)."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 1, 23, 2, generator=g, dtype=torch.float64) for _ in range(3))
    plain = build_attention("deltanet", head_dim=2, causal=True, output_norm=False, **options).double()
    with torch.no_grad():
        plain.beta_weight.zero_()
        plain.beta_bias.fill_(0.3)
    gated_out = gated(a_log=-200.0, dt_bias=0.0, beta_bias=0.3, **options)(q, k, v)
    torch.testing.assert_close(gated_out, plain(q, k, v))


def test_chunked_form_with_strong_gates_from_a_given_state_matches_the_loop():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 19, 3, generator=g, dtype=torch.float64) for _ in range(3))
    k = torch.nn.functional.normalize(k, dim=-1)
    beta = torch.rand(2, 2, 19, generator=g, dtype=torch.float64)
    start = torch.randn(2, 2, 3, 3, generator=g, dtype=torch.float64)
    for scale in (0.01, 1.0, 30.0):  # alpha from 0.99 to exp(-30)
        log_gate = -scale * torch.rand(2, 2, 19, generator=g, dtype=torch.float64)
        ref_out, ref_state = naive_delta_rule(q, k, v, beta, log_gate, initial=start)
        for chunk in (1, 4, 64):
            out, state = chunk_delta_rule(q, k, v, beta, log_gate, chunk=chunk, initial=start)
            torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(state, ref_state, rtol=1e-10, atol=1e-10)


def test_state_is_one_d_by_d_memory_per_head():
    attn = build_attention("gated-deltanet", head_dim=8, num_heads=3, causal=True)
    assert state_bytes(attn.init_state(1)) == 3 * 8 * 8 * 4
    caps = attention_capabilities("gated-deltanet")
    assert caps.causal and caps.recurrent_state and not caps.normalised


def test_same_seed_same_weights_other_seed_other_weights():
    """Every parameter drawn at random comes from the attention's own generator, seeded by `seed`."""
    torch.manual_seed(0)
    first = build_attention("gated-deltanet", head_dim=8, seed=3)
    torch.manual_seed(1)  # torch's global generator plays no part
    second, other = (build_attention("gated-deltanet", head_dim=8, seed=s) for s in (3, 4))
    drawn = {"beta_weight", "decay.weight", "decay.dt_bias", "decay.a_log"}
    for (name, a), b, c in zip(first.named_parameters(), second.parameters(), other.parameters()):
        assert torch.equal(a, b), name
        assert name not in drawn or not torch.equal(a, c), name
