"""Retention against RetNet's equations worked by hand, and its decay schedule."""

import torch

from attnbench.baselines.retention import retention_decays
from attnbench.registry import attention_capabilities, build_attention


def test_decay_schedule_is_retnets():
    assert retention_decays(3).tolist() == [1 - 1 / 32, 1 - 1 / 64, 1 - 1 / 128]


def test_two_heads_of_one_dimension_by_hand():
    """o_n = sum_{m <= n} gamma^(n-m) (q_n k_m) v_m (D = 1, so no 1/sqrt(D)), gamma = 31/32 and 63/64."""
    attn = build_attention("retention", head_dim=1, num_heads=2, causal=True, output_norm=False).double()
    q = torch.tensor([1.0, 2.0, -1.0], dtype=torch.float64)
    k = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    v = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)
    out = attn(*(x.view(1, 1, 3, 1).expand(1, 2, 3, 1) for x in (q, k, v)))
    for head, g in enumerate((31 / 32, 63 / 64)):
        expected = [1 * (0.5 * 1), 2 * (g * 0.5 * 1 + 1 * -2), -1 * (g * g * 0.5 * 1 + g * 1 * -2 + 2 * 3)]
        torch.testing.assert_close(out[0, head, :, 0], torch.tensor(expected, dtype=torch.float64))


def test_encoder_form_is_the_symmetric_decay():
    """Without the causal mask, o_n = sum_m gamma^|n-m| (q_n . k_m / sqrt(D)) v_m, from the parallel form."""
    attn = build_attention("retention", head_dim=4, num_heads=1, output_norm=False).double()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    n = torch.arange(6)
    decay = (31 / 32) ** (n[:, None] - n[None, :]).abs().double()
    expected = (q[0, 0] @ k[0, 0].T / 2 * decay) @ v[0, 0]
    torch.testing.assert_close(attn(q, k, v)[0, 0], expected)


def test_capabilities_say_causal_recurrent_and_not_normalised():
    caps = attention_capabilities("retention")
    assert caps.causal and caps.recurrent_state and caps.padding_mask and not caps.normalised
