"""DeltaNet against the delta rule worked by hand: overwriting a key, exact recall of orthonormal keys; with
`allow_neg_eigval` (Grazzi et al. 2025), a negative eigenvalue and parity carried by one head."""

import itertools
import math
import operator

import pytest
import torch

from attnbench.baselines.deltanet.chunk import chunk_delta_rule
from attnbench.baselines.deltanet.naive import naive_delta_rule
from attnbench.recurrence import step_through
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


def test_negative_eigenvalues_double_beta_and_nothing_else():
    """`allow_neg_eigval` draws the same parameters and writes with beta = 2 sigmoid(...) (fla's layers)."""
    plain = build_attention("deltanet", head_dim=4, num_heads=2, seed=3).double()
    doubled = build_attention("deltanet", head_dim=4, num_heads=2, seed=3, allow_neg_eigval=True).double()
    for a, b in zip(plain.parameters(), doubled.parameters()):
        assert torch.equal(a, b)
    q, k, v = (
        torch.randn(2, 2, 7, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(s)) for s in range(3)
    )
    plain_inputs, doubled_inputs = plain.gated_inputs(q, k, v, None), doubled.gated_inputs(q, k, v, None)
    torch.testing.assert_close(doubled_inputs[3], 2 * plain_inputs[3], rtol=0, atol=0)
    for a, b in zip(plain_inputs[:3], doubled_inputs[:3]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["deltanet", "gated-deltanet"])
def test_the_transition_takes_a_negative_eigenvalue_only_with_the_option(name):
    """One step from the state S = I with v = 0 leaves the transition itself, alpha (I - beta k k^T): with the option
    and beta > 1 its eigenvalue along k, alpha (1 - beta), is negative; without it every eigenvalue stays >= 0 (to
    rounding), whatever the key and beta's bias."""
    g = torch.Generator().manual_seed(0)
    keys = torch.randn(64, 1, 4, dtype=torch.float64, generator=g)
    for allow, bias in ((True, 4.0), (False, 4.0), (False, 40.0), (False, -4.0)):
        attn = build_attention(name, head_dim=4, num_heads=1, causal=True, output_norm=False, allow_neg_eigval=allow)
        attn = attn.double()
        with torch.no_grad():
            attn.beta_bias.fill_(bias)
            state = attn.init_state(64)
            state["core.kv"] = torch.eye(4, dtype=torch.float64).expand(64, 1, 4, 4).clone()
            _, after = attn.step(keys, keys, torch.zeros_like(keys), state)
        eigenvalues = torch.linalg.eigvalsh(after["core.kv"][:, 0])  # symmetric: alpha (I - beta k k^T)
        if allow:
            assert (eigenvalues[:, 0] < -0.5).all() and (eigenvalues[:, 1:] > 0).all()  # one, along k
        else:
            assert (eigenvalues > -1e-12).all(), f"bias {bias}: smallest eigenvalue {float(eigenvalues.min()):.3g}"


def parity_layer(name: str, allow_neg_eigval: bool) -> torch.nn.Module:
    """One head (D = 2) set by hand: keys along e1 whose raw length says the token (start 2, bit 0 1, bit 1 3), so
    beta = s sigmoid(40 (|k| - 2)), s = 2 with the option (else 1): start 1 (1/2), bit 0 -> 0, bit 1 -> 2 (1); the
    gate of Gated DeltaNet held at alpha = exp(-exp(-4) log 2) = 0.987."""
    attn = build_attention(
        name, head_dim=2, num_heads=1, causal=True, output_norm=False, allow_neg_eigval=allow_neg_eigval
    ).double()
    with torch.no_grad():
        attn.beta_weight.zero_()
        attn.beta_weight[0, 0, 0] = 40.0
        attn.beta_bias.fill_(-80.0)
        if name == "gated-deltanet":
            attn.decay.weight.zero_()
            attn.decay.dt_bias.fill_(0.0)
            attn.decay.a_log.fill_(-4.0)
    return attn


def parity_inputs(bits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v (B, 1, 1 + N, 2) for bit strings (B, N): a start token writing v = e1, then the bits writing v = 0."""
    lengths = torch.cat([torch.full_like(bits[:, :1], 2.0), 1.0 + 2.0 * bits], dim=1).double()
    k = torch.stack([lengths, torch.zeros_like(lengths)], dim=-1)[:, None]
    v = torch.zeros_like(k)
    v[:, :, 0, 0] = 1.0
    return torch.ones_like(k) * torch.tensor([1.0, 0.0], dtype=torch.float64), k, v


@pytest.mark.parametrize("name", ["deltanet", "gated-deltanet"])
def test_negative_eigenvalues_carry_parity_in_one_head(name):
    """With the option the memory's sign along the key after each bit is (-1)^(xor of the bits so far), a fold of
    xor over the string, in every rendering (chunked, token loop, decoding steps); without it (beta < 1, the
    eigenvalue 1 - beta >= 0) the sign never turns, so the same head cannot say the parity."""
    bits = torch.randint(0, 2, (16, 40), generator=torch.Generator().manual_seed(0))
    parity = torch.tensor([list(itertools.accumulate(row, operator.xor)) for row in bits.tolist()])
    expected = 1.0 - 2.0 * parity
    q, k, v = parity_inputs(bits)
    neg, plain = parity_layer(name, True), parity_layer(name, False)
    with torch.no_grad():
        stepped = step_through(neg, q, k, v)[0]
        for out in (neg(q, k, v), neg.naive_forward(q, k, v), stepped):
            assert torch.equal(torch.sign(out[:, 0, 1:, 0]), expected)
        held = plain(q, k, v)[:, 0, 1:, 0]
    assert (held > -1e-12).all()  # never the negative sign an odd prefix needs (rounding of a memory wiped to 0 aside)
    assert (expected < 0).any()
