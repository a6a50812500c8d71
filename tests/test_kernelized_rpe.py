"""Kernelized attention with RPE against a dense float64 Toeplitz computation of the same kernel, its positive random
features against exp(x . y), its no-RPE limit against the shared linear kernel, and its fixed-size decoding state."""

import math

import pytest
import torch
from recurrent_forms import prefilled_state_bytes

from attnbench.baselines.kernelized_rpe import DENSE_UP_TO, fft
from attnbench.baselines.kernelized_rpe.fft import toeplitz_product
from attnbench.baselines.kernelized_rpe.naive import offset_weights
from attnbench.kernels.linear.parallel import linear_attention
from attnbench.recurrence import step_through
from attnbench.registry import build_attention

B, H, N, D = 2, 3, 31, 8


def rpe(causal: bool, max_distance: int, seed: int = 0, **options) -> torch.nn.Module:
    options = {"form": "fft", **options}  # the FFT form at any length (auto takes the dense one at these lengths)
    attn = build_attention(
        "kernelized-rpe", head_dim=D, num_heads=H, causal=causal, max_distance=max_distance, seed=2, **options
    ).double()
    with torch.no_grad():  # learned biases away from their zero start, so that every offset weighs differently
        attn.position_bias.copy_(torch.randn(attn.position_bias.shape, generator=torch.Generator().manual_seed(seed)))
    return attn


def inputs(seed: int = 0, n: int = N) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, D, generator=g, dtype=torch.float64) for _ in range(3)]


def unit(x):
    return x / x.norm(dim=-1, keepdim=True)


def dense_toeplitz_attention(attn, q, k, v, mask=None):
    """The definition, dense: w_ij = exp(b_{clip(j - i)}) phi(q_i) . phi(k_j) (0 for j > i when causal), phi the
    positive random features of the unit rows, out_i = sum_j w_ij v_j / sum_j w_ij over real keys."""
    n, big_k = q.shape[2], attn.cfg.max_distance
    omega = attn.omega.double()

    def phi(x):
        return torch.exp(unit(x) @ omega.transpose(-2, -1) - 0.5) / math.sqrt(omega.shape[1])

    c = torch.zeros(H, n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(n):
            if attn.causal and j > i:
                continue
            c[:, i, j] = attn.position_bias[:, max(-big_k, min(big_k, j - i)) + big_k].exp()
    weights = (phi(q) @ phi(k).transpose(-2, -1)) * c
    if mask is not None:
        weights = weights * mask[:, None, None, :]
    return (weights @ v) / weights.sum(-1, keepdim=True)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "encoder"])
@pytest.mark.parametrize("max_distance", [1, 5, 16, N - 1, N + 3])
def test_fft_form_equals_the_dense_toeplitz_computation_in_float64(max_distance, causal):
    attn, (q, k, v) = rpe(causal, max_distance), inputs()
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, [3, 7, 8, 20]] = False  # padding inside a sequence
    mask[1, 25:] = False  # and at its end
    with torch.no_grad():
        out, expected = attn(q, k, v, key_padding_mask=mask), dense_toeplitz_attention(attn, q, k, v, mask)
    real = mask[:, None, :, None].expand_as(out)
    error = float((out - expected)[real].abs().max())
    assert error < 1e-12, f"max float64 difference from the dense Toeplitz computation {error:.3g}"
    if causal:
        with torch.no_grad():
            stepped = step_through(attn, q, k, v, mask)[0]
        torch.testing.assert_close(stepped[real], expected[real], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 7, 64])
@pytest.mark.parametrize("max_distance", [1, 3, 8, 100])
def test_toeplitz_product_by_blocks_equals_the_matrix_product(n, max_distance):
    g = torch.Generator().manual_seed(n + max_distance)
    x = torch.randn(2, 3, n, 5, generator=g, dtype=torch.float64)
    for causal in (True, False):
        bias = torch.randn(3, (1 if causal else 2) * max_distance + 1, generator=g, dtype=torch.float64)
        weights = offset_weights(bias, max_distance, causal, n)
        i = torch.arange(n)
        matrix = weights[:, i[:, None] - i[None, :] + n - 1]  # C_ij = c(i - j)
        product = toeplitz_product(x.transpose(-2, -1), weights, max_distance).transpose(-2, -1)  # the sequence last
        torch.testing.assert_close(product, matrix @ x, rtol=1e-12, atol=1e-12)


def test_positive_random_features_estimate_the_exponential_kernel():
    """E[phi(x) . phi(y)] = exp(x . y) for unit x, y (Performer's positive random features)."""
    attn = build_attention("kernelized-rpe", head_dim=D, num_features=20000, seed=4).double()
    g = torch.Generator().manual_seed(5)
    x, y = (torch.randn(1, 1, 50, D, generator=g, dtype=torch.float64) for _ in range(2))
    estimate = (attn.features(x) * attn.features(y)).sum(-1)
    exact = torch.exp((unit(x) * unit(y)).sum(-1))
    assert float(((estimate - exact) / exact).abs().max()) < 0.05
    assert bool((attn.features(x) > 0).all())


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "encoder"])
def test_with_zero_biases_it_is_linear_attention_over_the_same_features(causal):
    """b = 0 (every offset weighs 1, the start of training): the shared linear kernel over phi(q), phi(k)."""
    attn, (q, k, v) = rpe(causal, 4), inputs(seed=1)
    with torch.no_grad():
        attn.position_bias.zero_()
        expected = linear_attention(attn.features(q), attn.features(k), v, None, eps=0.0, causal=causal)
        torch.testing.assert_close(attn(q, k, v), expected, rtol=1e-12, atol=1e-12)


def test_decoding_state_is_flat_and_prefill_matches_steps():
    attn, (q, k, v) = rpe(True, 6, short_conv=3), inputs(seed=3)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, :4] = False
    sizes = set(prefilled_state_bytes(attn, q, k, v, mask, (2, 6, 13, N)).values())
    assert sizes == {B * attn.state_size(N, torch.float64)}
    assert attn.state_size(16) == attn.state_size(16384)


def test_random_features_come_from_the_seed_alone():
    torch.manual_seed(1)
    first = build_attention("kernelized-rpe", head_dim=D, num_heads=H, seed=9)
    torch.manual_seed(2)
    again = build_attention("kernelized-rpe", head_dim=D, num_heads=H, seed=9)
    assert torch.equal(first.omega, again.omega)
    assert not torch.equal(first.omega, build_attention("kernelized-rpe", head_dim=D, num_heads=H, seed=10).omega)


def test_features_taken_in_groups_give_the_same_outputs(monkeypatch):
    """The FFT form takes the features a group at a time (bounded memory); groups of 3 of 10 change nothing."""
    attn, (q, k, v) = rpe(True, 5, num_features=10), inputs(seed=6)
    whole = attn(q, k, v)
    monkeypatch.setattr(fft, "GROUP_VALUES", B * H * (D + 1) * 3 * N * 3)
    torch.testing.assert_close(attn(q, k, v), whole, rtol=1e-13, atol=1e-13)


def test_auto_form_is_dense_on_short_sequences_and_the_fft_beyond():
    attn = build_attention("kernelized-rpe", head_dim=D, num_heads=H, num_features=8, max_distance=8).double()
    for n, route in ((DENSE_UP_TO, "dense"), (DENSE_UP_TO + 1, "fft")):
        q, k, v = inputs(seed=7, n=n)
        attn.reset_routes()
        with torch.no_grad():
            out = attn(q, k, v)
            torch.testing.assert_close(out, attn.naive_forward(q, k, v), rtol=1e-12, atol=1e-12)
        assert attn.kernel_routes == {route: 1}
