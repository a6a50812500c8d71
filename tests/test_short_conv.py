"""The short causal convolution against its formula by hand, its step, padding, and the option's validation."""

import pytest
import torch

from attnbench.errors import ConfigError
from attnbench.kernels.short_conv import ShortConvolution
from attnbench.recurrence import step_through
from attnbench.registry import build_attention


def silu(x: float) -> float:
    return x / (1 + torch.exp(torch.tensor(-x, dtype=torch.float64)).item())


def test_filter_by_hand():
    """out_t = silu(w_0 x_{t-2} + w_1 x_{t-1} + w_2 x_t), zeros before the start."""
    conv = ShortConvolution(num_heads=1, head_dim=1, kernel_size=3, generator=torch.Generator().manual_seed(0)).double()
    with torch.no_grad():
        conv.weight.copy_(torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64).expand(3, 1, 1, 3))
    x = [1.0, 2.0, -1.0, 3.0]
    expected = [silu(2 * x[0]), silu(-1 * x[0] + 2 * x[1])] + [
        silu(0.5 * x[t - 2] - 1 * x[t - 1] + 2 * x[t]) for t in (2, 3)
    ]
    series = torch.tensor(x, dtype=torch.float64).view(1, 1, 4, 1)
    for out in conv(series, series, series):
        torch.testing.assert_close(out.flatten(), torch.tensor(expected, dtype=torch.float64))


def test_step_equals_the_filter_and_padding_is_zeroed():
    conv = ShortConvolution(num_heads=3, head_dim=4, kernel_size=4, generator=torch.Generator().manual_seed(0)).double()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 9, 4, generator=g, dtype=torch.float64) for _ in range(3))
    full = conv(q, k, v)
    state, outs = conv.init_state(2, 3, 4, torch.float64, torch.device("cpu")), []
    for t in range(9):
        out, state = conv.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        outs.append(torch.stack(out))
    torch.testing.assert_close(torch.stack(outs, dim=3), torch.stack(full), rtol=1e-12, atol=1e-12)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[0, 2] = False  # a hole: position 2 must reach no later output
    loud = q.clone()
    loud[0, :, 2] = 1e3
    torch.testing.assert_close(conv(loud, k, v, mask)[0], conv(q, k, v, mask)[0])


FEATURE_MAP_ATTENTIONS = [
    "retention",
    "gla",
    "deltanet",
    "based",
    "hedgehog",
    "elu-linear",
    "performer",
    "rfa",
    "random-features",
    "coulomb",
]


@pytest.mark.parametrize("name", FEATURE_MAP_ATTENTIONS)
def test_every_feature_map_attention_takes_the_option(name):
    attn = build_attention(name, head_dim=4, num_heads=2, short_conv=4)
    assert attn.short_conv.weight.shape == (3, 2, 4, 4)
    assert build_attention(name, head_dim=4).short_conv is None
    with pytest.raises(ConfigError, match="short_conv"):
        build_attention(name, short_conv=-1)


def test_the_shared_kernel_filters_q_k_v_before_its_map():
    """elu-linear with short_conv equals elu-linear without it on the filtered inputs, causal form and padding."""
    attn = build_attention("elu-linear", head_dim=4, num_heads=2, short_conv=3, causal=True)
    plain = build_attention("elu-linear", head_dim=4, num_heads=2, causal=True)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 7, 4, generator=g) for _ in range(3))
    mask = torch.tensor([[True] * 7, [True] * 5 + [False] * 2])
    with torch.no_grad():
        torch.testing.assert_close(
            attn(q, k, v, key_padding_mask=mask), plain(*attn.short_conv(q, k, v, mask), key_padding_mask=mask)
        )


@pytest.mark.parametrize("name", ["softmax", *FEATURE_MAP_ATTENTIONS])
def test_the_recurrent_step_filters_as_the_parallel_form(name):
    """With short_conv, stepping token by token equals the causal forward (float64, padding at both ends and
    a hole), and `prefill_state` (given the queries) equals the state the steps leave."""
    attn = build_attention(name, head_dim=4, num_heads=2, short_conv=3, causal=True).double()
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 2, 12, 4, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[0, 9:] = False
    mask[1, :3] = False
    mask[1, 6] = False  # a hole: the filter sees it as 0, the state skips it
    with torch.no_grad():
        parallel = attn(q, k, v, key_padding_mask=mask)
        stepped, state = step_through(attn, q, k, v, mask)
        real = mask[:, None, :, None].expand_as(parallel)
        torch.testing.assert_close(stepped[real], parallel[real], rtol=1e-10, atol=1e-10)
        if hasattr(attn, "prefill_state"):
            prefilled = attn.prefill_state(k, v, mask, q=q)
            assert sorted(prefilled) == sorted(state)
            for key in state:
                torch.testing.assert_close(prefilled[key].to(state[key]), state[key], rtol=1e-10, atol=1e-10)
