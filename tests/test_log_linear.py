"""Log-linear attention against its definition: the Fenwick levels enumerated bucket by bucket, the limit lambda = 1
(Mamba-2's recurrence), the chunked form against the definition for gates from gentle to strong, and the state's
logarithmic growth."""

import pytest
import torch

from attnbench.baselines.gla.naive import naive_gated_recurrence
from attnbench.baselines.log_linear.chunk import chunk_log_linear_packed
from attnbench.baselines.log_linear.naive import bit_length, naive_log_linear
from attnbench.errors import ConfigError
from attnbench.recurrence import state_bytes, step_through
from attnbench.registry import build_attention


def test_levels_are_the_fenwick_buckets_of_the_prefix():
    """Query t cuts keys 0 .. t-1 into one bucket per set bit j of t, 2^j keys each, oldest first; their level is
    j + 1 and the query's own key has level 0."""
    for t in range(70):
        expected = {t: 0}
        end = 0
        for j in reversed(range(t.bit_length())):
            if t >> j & 1:
                expected.update({s: j + 1 for s in range(end, end + 2**j)})
                end += 2**j
        s = torch.arange(t + 1)
        got = bit_length(torch.tensor(t) ^ s, 8)
        assert dict(zip(s.tolist(), got.tolist())) == expected, t


def test_with_every_lambda_one_it_is_mamba2s_recurrence():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 37, 4, generator=g, dtype=torch.float64) for _ in range(3))
    log_gate = -torch.rand(2, 3, 37, generator=g, dtype=torch.float64)
    ones, real = torch.ones(2, 3, 37, 7, dtype=torch.float64), torch.ones(2, 37, dtype=torch.bool)
    expected, _ = naive_gated_recurrence(q, k, v, log_gate[..., None])
    torch.testing.assert_close(naive_log_linear(q, k, v, log_gate, ones, real)[0], expected)
    torch.testing.assert_close(chunk_log_linear_packed(q, k, v, log_gate, ones, 8), expected)


@pytest.mark.parametrize("strength", [1e-3, 1.0, 50.0])
def test_chunks_match_the_definition_from_gentle_to_strong_decay(strength):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 75, 4, generator=g, dtype=torch.float64) for _ in range(3))
    log_gate = -strength * torch.rand(2, 2, 75, generator=g, dtype=torch.float64)
    scales = 2 * torch.rand(2, 2, 75, 8, generator=g, dtype=torch.float64)
    expected, _ = naive_log_linear(q, k, v, log_gate, scales, torch.ones(2, 75, dtype=torch.bool))
    for chunk in (1, 4, 16, 64):
        torch.testing.assert_close(chunk_log_linear_packed(q, k, v, log_gate, scales, chunk), expected)


def test_the_state_grows_by_a_level_at_each_power_of_two():
    attn = build_attention("log-linear", head_dim=4, num_heads=2, causal=True)
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 20, 4, generator=g) for _ in range(3))
    state = attn.init_state(1)
    depths = []
    for t in range(20):
        _, state = attn.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        depths.append(state["core.levels"].shape[2])
    assert depths == [(n + 1).bit_length() for n in range(20)]  # 1, 2, 2, 3, 3, 3, 3, 4, ...
    assert state_bytes(state) == 2 * 5 * 4 * 4 * 4 + 8  # five (4, 4) float32 levels per head, and the count


def test_limits_are_refused_with_the_option_to_change():
    with pytest.raises(ConfigError, match="power of two"):
        build_attention("log-linear", head_dim=4, chunk_size=48)
    attn = build_attention("log-linear", head_dim=4, num_levels=4, chunk_size=2, causal=True)
    x = torch.randn(1, 1, 9, 4)
    with pytest.raises(ConfigError, match="up to 8 tokens"):
        attn(x, x, x)
    _, state = step_through(attn, x[:, :, :8], x[:, :, :8], x[:, :, :8])
    with pytest.raises(ConfigError, match="num_levels=4"):
        attn.step(x[:, :, 8], x[:, :, 8], x[:, :, 8], state)
