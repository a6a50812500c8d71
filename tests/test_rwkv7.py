"""RWKV-7 against its recurrence worked by hand, its limits (no decay and a = 1 is the delta rule with beta = 1),
its token shift, its bounded decay, the chunked form against the loop, and the state it carries."""

import math

import torch

from attnbench.baselines.deltanet.naive import naive_delta_rule
from attnbench.baselines.rwkv7 import DECAY_BOUND
from attnbench.baselines.rwkv7.chunk import chunk_dplr
from attnbench.baselines.rwkv7.naive import naive_dplr
from attnbench.recurrence import state_bytes
from attnbench.registry import build_attention


def test_two_tokens_by_hand():
    """S_1 = k_1 v_1^T (from S_0 = 0); S_2 = diag(w_2) S_1 + beta_2 (alpha_2^T S_1) + k_2 v_2^T; o_t = S_t^T q_t."""
    q = torch.tensor([[1.0, 2.0], [0.5, -1.0]], dtype=torch.float64)
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    v = torch.tensor([[2.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
    alpha = torch.tensor([[0.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    beta = torch.tensor([[0.0, 0.0], [0.5, 0.25]], dtype=torch.float64)
    w = torch.tensor([[0.9, 0.8], [0.5, 0.25]], dtype=torch.float64)
    s1 = torch.tensor([[2.0, 1.0], [0.0, 0.0]], dtype=torch.float64)  # k_1 v_1^T
    read = -s1[0]  # alpha_2^T S_1 = -(row 0 of S_1)
    s2 = torch.diag(w[1]) @ s1 + beta[1][:, None] * read[None, :] + k[1][:, None] * v[1][None, :]
    expected = torch.stack([s1.T @ q[0], s2.T @ q[1]])
    out, state = naive_dplr(*(x[None, None] for x in (q, k, v, alpha, beta, w.log())))
    torch.testing.assert_close(out[0, 0], expected)
    torch.testing.assert_close(state[0, 0], s2)


def test_rate_one_without_decay_is_the_delta_rule_with_beta_one():
    """a = 1, w = 1 and kk = k (unit keys): S_t = (I - k k^T) S_{t-1} + k v^T = S + k (v - S^T k)^T."""
    g = torch.Generator().manual_seed(0)
    q, v = (torch.randn(2, 2, 29, 4, generator=g, dtype=torch.float64) for _ in range(2))
    k = torch.nn.functional.normalize(torch.randn(2, 2, 29, 4, generator=g, dtype=torch.float64), dim=-1)
    expected, _ = naive_delta_rule(q, k, v, torch.ones(2, 2, 29, dtype=torch.float64))
    for out, _ in (naive_dplr(q, k, v, -k, k, torch.zeros_like(k)), chunk_dplr(q, k, v, -k, k, torch.zeros_like(k), 8)):
        torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


def test_chunked_form_from_a_given_state_matches_the_loop_from_gentle_to_strong_decay():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 45, 4, generator=g, dtype=torch.float64) for _ in range(3))
    kk = torch.nn.functional.normalize(torch.randn(2, 3, 45, 4, generator=g, dtype=torch.float64), dim=-1)
    rate = torch.rand(2, 3, 45, 4, generator=g, dtype=torch.float64)
    start = torch.randn(2, 3, 4, 4, generator=g, dtype=torch.float64)
    for strength in (1e-3, 0.3, 1.0):  # w_t from 0.9994 to exp(-e^(-1/2)) = 0.545, RWKV-7's range
        log_gate = -DECAY_BOUND * strength * torch.rand(2, 3, 45, 4, generator=g, dtype=torch.float64)
        ref_out, ref_state = naive_dplr(q, k, v, -kk, kk * rate, log_gate, start)
        for chunk in (1, 16, 128):
            out, state = chunk_dplr(q, k, v, -kk, kk * rate, log_gate, chunk, start)
            torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(state, ref_state, rtol=1e-10, atol=1e-10)


def test_token_shift_mixes_each_stream_with_its_predecessor():
    """r_t = lerp(q_t, q_{t-1}, mu_r), q_{-1} = 0; a padded start is zeros to the first real token."""
    attn = build_attention("rwkv7", head_dim=4, num_heads=2, causal=True).double()
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    mu = attn.mix[0].detach()  # (heads, 1, D)
    before = torch.cat([torch.zeros_like(q[:, :, :1]), q[:, :, :-1]], dim=2)
    torch.testing.assert_close(attn.gated_inputs(q, k, v, None)[0], q + mu * (before - q))
    mask = torch.tensor([[False, False, True, True, True, True]])
    r = attn.gated_inputs(q, k, v, mask)[0]
    torch.testing.assert_close(r[:, :, 2], (1 - mu[:, 0]) * q[:, :, 2])


def test_decay_stays_inside_rwkv7s_bound():
    attn = build_attention("rwkv7", head_dim=8, causal=True).double()
    x = 1e3 * torch.randn(1, 1, 50, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    log_gate = attn.gated_inputs(x, x, x, None)[5]
    assert (log_gate < 0).all() and (log_gate > -math.exp(-0.5)).all()


def test_state_is_a_d_by_d_memory_per_head_and_the_last_token():
    """D x D per head (the memory) and the previous token's q, k, v for the shift: counted from the tensors."""
    attn = build_attention("rwkv7", head_dim=8, num_heads=3, causal=True)
    assert state_bytes(attn.init_state(1)) == 4 * 3 * (8 * 8 + 3 * 8)


def test_same_seed_same_weights():
    torch.manual_seed(0)
    first = build_attention("rwkv7", head_dim=8, seed=5)
    torch.manual_seed(1)
    second, other = (build_attention("rwkv7", head_dim=8, seed=s) for s in (5, 6))
    for (name, a), b, c in zip(first.named_parameters(), second.parameters(), other.parameters()):
        assert torch.equal(a, b), name
        assert not name.endswith(("_down", "_up")) or not torch.equal(a, c), name
