"""DeltaNet against the delta rule worked by hand: overwriting a key, exact recall of orthonormal keys."""

import math

import torch

from attnbench.baselines.deltanet.chunk import chunk_delta_rule
from attnbench.baselines.deltanet.naive import naive_delta_rule
from attnbench.registry import build_attention


def deltanet(beta_bias: float, **options) -> torch.nn.Module:
    attn = build_attention("deltanet", head_dim=2, causal=True, output_norm=False, **options).double()
    with torch.no_grad():
        attn.beta_weight.zero_()
        attn.beta_bias.fill_(beta_bias)
    return attn


def test_same_key_twice_by_hand():
    """beta = sigmoid(0) = 1/2, k = e1 twice: S_1 = 1/2 e1 v_1^T; S_2 = S_1 + 1/2 e1 (v_2 - S_1^T e1)^T;
    o_t = S_t^T q_t / sqrt(2), q_t = e1 after L2 normalising."""
    k = torch.tensor([[3.0, 0.0], [0.5, 0.0]], dtype=torch.float64)  # both normalise to e1
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    q = torch.tensor([[2.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    s1 = [0.5 * 1.0, 0.5 * 2.0]
    s2 = [s1[0] + 0.5 * (3.0 - s1[0]), s1[1] + 0.5 * (4.0 - s1[1])]  # [1.75, 2.5]
    expected = torch.tensor([s1, s2], dtype=torch.float64) / math.sqrt(2)
    torch.testing.assert_close(deltanet(0.0)(q[None, None], k[None, None], v[None, None])[0, 0], expected)


def test_beta_one_replaces_and_orthonormal_keys_recall_their_last_value():
    """With beta = 1 the delta rule writes v exactly under k: after e1 -> a, e2 -> b, e1 -> c, reading e1 gives c
    and e2 gives b (a plain linear attention would give a + c)."""
    attn = deltanet(60.0)  # sigmoid(60) = 1 to float64
    e1, e2 = [1.0, 0.0], [0.0, 1.0]
    k = torch.tensor([e1, e2, e1, e1, e2], dtype=torch.float64)
    q = torch.tensor([e1, e1, e1, e1, e2], dtype=torch.float64)
    v = torch.tensor([[1.0, 1.0], [2.0, -2.0], [5.0, 7.0], [5.0, 7.0], [2.0, -2.0]], dtype=torch.float64)
    out = attn(q[None, None], k[None, None], v[None, None])[0, 0] * math.sqrt(2)
    torch.testing.assert_close(out[3], torch.tensor([5.0, 7.0], dtype=torch.float64))
    torch.testing.assert_close(out[4], torch.tensor([2.0, -2.0], dtype=torch.float64))


def test_wy_form_from_a_given_state_matches_the_loop():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 19, 3, generator=g, dtype=torch.float64) for _ in range(3))
    k = torch.nn.functional.normalize(k, dim=-1)
    beta = torch.rand(2, 2, 19, generator=g, dtype=torch.float64)
    start = torch.randn(2, 2, 3, 3, generator=g, dtype=torch.float64)
    for chunk in (1, 4, 64):
        out, state = chunk_delta_rule(q, k, v, beta, chunk=chunk, initial=start)
        ref_out, ref_state = naive_delta_rule(q, k, v, beta, initial=start)
        torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(state, ref_state, rtol=1e-10, atol=1e-10)


def test_encoder_form_reads_the_final_memory():
    attn = build_attention("deltanet", head_dim=4, output_norm=False).double()
    causal = build_attention("deltanet", head_dim=4, causal=True, output_norm=False).double()
    causal.load_state_dict(attn.state_dict())
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, 9, 4, generator=g, dtype=torch.float64) for _ in range(3))
    out = attn(q, k, v)[0, 0]
    for i in range(9):  # query i against the memory after all 9 writes = the causal output of q_i placed last
        q_last = q.clone()
        q_last[:, :, -1] = q[:, :, i]
        torch.testing.assert_close(out[i], causal(q_last, k, v)[0, 0, -1])
