"""FoX against fla-core's reference (fla/ops/forgetting_attn/naive.py) in float64, its gate against the paper's
formula, its encoder form against its definition, and its KV cache."""

import math

import pytest
import torch
from fla_naive import in_float64, load_naive, oracle_name
from recurrent_forms import prefilled_state_bytes

from attnbench.decoder import TransformerDecoder
from attnbench.model import ModelConfig
from attnbench.recurrence import step_through
from attnbench.registry import build_attention

OP = "forgetting_attn"
B, H, N, D = 2, 3, 29, 8
# gate bias -> forget gates from gentle (f ~ 0.9975: a long memory) to strong (f ~ 0.05: a few tokens)
GATES = {"gentle": 6.0, "medium": 0.0, "strong": -3.0}


def fox(causal: bool = True, bias: float | None = None, **options) -> torch.nn.Module:
    attn = build_attention("fox", head_dim=D, num_heads=H, causal=causal, seed=1, **options).double()
    if bias is not None:
        with torch.no_grad():
            attn.gate_bias.fill_(bias)
    return attn


def inputs(seed: int = 0, n: int = N) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, D, generator=g, dtype=torch.float64) for _ in range(3)]


def fla_forgetting(q, k, v, log_gate, window=None):
    """fla's naive_forgetting_attn in our layout: (B, H, N, D) in and out, log_gate (B, H, N), in float64."""
    naive = load_naive(OP).naive_forgetting_attn
    out = in_float64(naive, *(x.transpose(1, 2) for x in (q, k, v)), log_gate.transpose(1, 2), window_size=window)
    return out.transpose(1, 2)


@pytest.mark.parametrize("strength", GATES)
def test_causal_fox_equals_fla_reference_in_float64(strength):
    attn, (q, k, v) = fox(bias=GATES[strength]), inputs()
    expected = fla_forgetting(q, k, v, attn.log_gate(k)).detach()
    out = attn(q, k, v).detach()
    error = float((out - expected).abs().max())
    assert error < 1e-12, f"{oracle_name(OP)}: max float64 difference {error:.3g}"
    stepped = step_through(attn, q, k, v)[0]
    torch.testing.assert_close(stepped, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("strength", GATES)
def test_padded_positions_are_removed_tokens_as_fla_unpads_them(strength):
    """fla's layer drops padding before its kernel (unpad_input); here a padded position forgets nothing and is
    never read, so a padded sequence's real outputs are fla's reference on the sequence without its padding."""
    attn, (q, k, v) = fox(bias=GATES[strength]), inputs(seed=1)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, [3, 4, 11, 20]] = False  # padding inside a sequence
    mask[1, 22:] = False  # and at its end
    out = attn(q, k, v, key_padding_mask=mask).detach()
    stepped = step_through(attn, q, k, v, mask)[0]
    for row in range(B):
        real = mask[row]
        part = [x[row : row + 1, :, real] for x in (q, k, v)]
        expected = fla_forgetting(*part, attn.log_gate(part[1])).detach()
        assert float((out[row : row + 1, :, real] - expected).abs().max()) < 1e-12, oracle_name(OP)
        torch.testing.assert_close(stepped[row : row + 1, :, real], expected, rtol=1e-12, atol=1e-12)


def test_gate_is_the_logsigmoid_of_a_projection_of_the_key():
    attn, (_, k, _) = fox(), inputs()
    w, b = attn.gate_weight.detach(), attn.gate_bias.detach()
    expected = torch.log(torch.sigmoid(torch.einsum("bhnd,hd->bhn", k, w[..., 0]) + b[:, 0, 0][:, None]))
    torch.testing.assert_close(attn.log_gate(k), expected)
    assert w.shape == (H, D, 1) and b.shape == (H, 1, 1)


def test_gates_come_from_the_seed_alone():
    """Each gate parameter is drawn from a generator of its own: the global random state does not move them."""
    torch.manual_seed(123)
    first = build_attention("fox", head_dim=D, num_heads=H, seed=5)
    torch.manual_seed(456)
    again = build_attention("fox", head_dim=D, num_heads=H, seed=5)
    other = build_attention("fox", head_dim=D, num_heads=H, seed=6)
    assert torch.equal(first.gate_weight, again.gate_weight) and torch.equal(first.gate_bias, again.gate_bias)
    assert not torch.equal(first.gate_weight, other.gate_weight)


def test_two_tokens_by_hand():
    """Gate bias b, weights 0: f = sigmoid(b). Query 1 weighs key 0 by exp(s_10 + log f_1), itself by exp(s_11)."""
    attn = build_attention("fox", head_dim=2, causal=True).double()
    with torch.no_grad():
        attn.gate_weight.zero_()
        attn.gate_bias.fill_(0.5)
    q = torch.tensor([[1.0, 0.0], [0.5, -1.0]], dtype=torch.float64)
    k = torch.tensor([[2.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    v = torch.tensor([[1.0, 2.0], [-1.0, 3.0]], dtype=torch.float64)
    out = attn(q[None, None], k[None, None], v[None, None])[0, 0]
    log_f = math.log(1 / (1 + math.exp(-0.5)))
    w0 = math.exp(float(q[1] @ k[0]) / math.sqrt(2) + log_f)
    w1 = math.exp(float(q[1] @ k[1]) / math.sqrt(2))
    torch.testing.assert_close(out[1], (w0 * v[0] + w1 * v[1]) / (w0 + w1))
    torch.testing.assert_close(out[0], v[0])


def test_encoder_form_forgets_on_either_side():
    """Encoder: key j weighs exp(s_ij + F_ij), F the log gates strictly after the earlier of i, j up to the later."""
    attn, (q, k, v) = fox(causal=False, bias=-0.5), inputs(seed=2, n=7)
    g = attn.log_gate(k)
    i = 3
    scores = torch.einsum("bhd,bhjd->bhj", q[:, :, i], k) / math.sqrt(D)
    bias = torch.stack([g[..., min(i, j) + 1 : max(i, j) + 1].sum(-1) for j in range(7)], dim=-1)
    expected = torch.einsum("bhj,bhjd->bhd", torch.softmax(scores + bias, dim=-1), v)
    torch.testing.assert_close(attn(q, k, v)[:, :, i], expected)


def test_without_forgetting_fox_is_softmax_attention():
    """Gates pinned at 1 (log f = 0): causal and encoder FoX are softmax attention."""
    attn_causal, attn_encoder = fox(True), fox(False)
    q, k, v = inputs(seed=3)
    for attn in (attn_causal, attn_encoder):
        attn.log_gate = lambda k, mask=None: torch.zeros(k.shape[:-1], dtype=k.dtype)
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=attn.causal)
        torch.testing.assert_close(attn(q, k, v), expected)


def test_a_decoder_with_its_gates_held_open_is_the_softmax_decoder():
    """The model-level limit, short convolution and every layer included: gates held at f = 1 (bias 40, so log f
    ~ -4e-18) give the softmax decoder of the same seed, logits and gradients of the shared weights alike; at FoX's
    initial gates (f ~ 1/2 per token, the reference's) they differ."""
    cfg = ModelConfig(vocab_size=40, max_length=24, d_model=16, num_heads=2, ffn_dim=32, dropout=0.0, num_layers=2)
    ids = torch.randint(0, 40, (3, 24), generator=torch.Generator().manual_seed(5))
    softmax = TransformerDecoder(cfg, "softmax", {"short_conv": 3}, seed=7).double()
    forgetting = TransformerDecoder(cfg, "fox", {"short_conv": 3}, seed=7).double()
    assert not torch.allclose(forgetting(ids), softmax(ids), atol=1e-3)
    with torch.no_grad():
        for attn in forgetting.attention_modules():
            attn.gate_bias.fill_(40.0)
    expected, logits = softmax(ids), forgetting(ids)
    torch.testing.assert_close(logits, expected, rtol=1e-12, atol=1e-12)
    expected.square().mean().backward()
    logits.square().mean().backward()
    grads = dict(forgetting.named_parameters())
    for name, p in softmax.named_parameters():
        torch.testing.assert_close(grads[name].grad, p.grad, rtol=1e-10, atol=1e-12, msg=name)


def test_kv_cache_grows_one_position_per_token_and_prefill_matches_steps():
    attn, (q, k, v) = fox(short_conv=3), inputs(seed=4)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, :4] = False
    sizes = prefilled_state_bytes(attn, q, k, v, mask, (5, N))
    assert sizes[N] == B * attn.state_size(N, torch.float64)  # every tensor has one row per sequence
    assert sizes[N] - sizes[5] == B * (N - 5) * ((2 * D + 1) * H * 8 + 1)
    assert attn.state_size(2 * N) - attn.state_size(N) == N * ((2 * D + 1) * H * 4 + 1)
