"""Skyformer against a dense float64 computation of the same Gaussian kernel: the kernel itself, the Nystrom form
with its regularised inverse from the same landmarks, and the exact limit where every row is a landmark."""

import math

import pytest
import torch

from attnbench.baselines.skyformer import landmark_positions, rank_draws
from attnbench.errors import ConfigError
from attnbench.registry import build_attention

B, H, N, D = 2, 3, 23, 8


def skyformer(**options) -> torch.nn.Module:
    return build_attention("skyformer", head_dim=D, num_heads=H, seed=3, **options).double().eval()


def inputs(seed: int = 0, n: int = N) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, D, generator=g, dtype=torch.float64) for _ in range(3)]


def kernel(x, y):
    """The paper's kernel, dense: exp(-|x_i - y_j|^2 / (2 sqrt(p))) -> (..., N, M)."""
    return torch.exp(
        -torch.cdist(x, y, compute_mode="donot_use_mm_for_euclid_dist").square() / (2 * math.sqrt(x.shape[-1]))
    )


def dense_kernel_attention(q, k, v, mask=None):
    """kappa(Q, K) V over the real keys, no normalisation (the paper's kernelized attention)."""
    weights = kernel(q, k)
    if mask is not None:
        weights = weights * mask[:, None, None, :]
    return weights @ v


def dense_nystrom(q, k, v, mask, num_landmarks, regularisation, seed, draw=0):
    """kappa(Q, L) (kappa(L, L) + lambda I)^-1 kappa(L, K) V by a dense solve, per sequence, with the landmark
    positions the attention draws (its real rows only)."""
    n = q.shape[2]
    outs = []
    for b in range(B):
        real = mask[b : b + 1]
        rows = []
        for part, (x, count) in enumerate(((q, num_landmarks // 2), (k, num_landmarks - num_landmarks // 2))):
            positions, valid = landmark_positions(real, count, rank_draws(n, seed, draw, part))
            rows.append(x[b][:, positions[0][valid[0]]])
        land = torch.cat(rows, dim=1)  # (H, m, p)
        core = kernel(land, land) + regularisation * torch.eye(land.shape[1], dtype=torch.float64)
        key_side = kernel(land, k[b]) * real[0]
        outs.append(kernel(q[b], land) @ torch.linalg.solve(core, key_side @ v[b]))
    return torch.stack(outs)


def test_every_row_a_landmark_with_an_exact_inverse_is_the_dense_gaussian_kernel_attention():
    """m >= 2 N: the Nystrom form holds the whole kernel matrix, and kappa(Q, L) kappa(L, L)^-1 kappa(L, K) =
    kappa(Q, K); padding inside and at the end of the sequences."""
    attn, (q, k, v) = skyformer(num_landmarks=2 * N, regularisation=0.0, inverse_iterations=0), inputs()
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, [4, 5, 13]] = False
    mask[1, 17:] = False
    out, expected = attn(q, k, v, key_padding_mask=mask), dense_kernel_attention(q, k, v, mask)
    real = mask[:, None, :, None].expand_as(out)
    error = float((out - expected)[real].abs().max() / expected[real].abs().max())
    assert error < 1e-8, f"relative difference from the dense float64 kernel attention {error:.3g}"


@pytest.mark.parametrize("regularisation", [0.1, 1e-3])
def test_regularised_nystrom_form_equals_its_dense_computation(regularisation):
    attn, (q, k, v) = skyformer(num_landmarks=12, regularisation=regularisation, inverse_iterations=0), inputs(1)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, 15:] = False
    expected = dense_nystrom(q, k, v, mask, 12, regularisation, seed=3)
    out = attn(q, k, v, key_padding_mask=mask)
    torch.testing.assert_close(out * mask[:, None, :, None], expected * mask[:, None, :, None], rtol=1e-11, atol=1e-11)


def test_newton_schulz_inverse_converges_to_the_exact_one():
    """The authors' 6 Newton-Schulz steps approximate the inverse; more steps reach the exact solve."""
    q, k, v = inputs(2)
    exact = skyformer(num_landmarks=16, inverse_iterations=0)(q, k, v)
    for steps, tolerance in ((6, 0.2), (40, 1e-9)):
        out = skyformer(num_landmarks=16, inverse_iterations=steps)(q, k, v)
        assert float((out - exact).abs().max() / exact.abs().max()) < tolerance, steps


def test_landmarks_are_distinct_real_tokens_drawn_by_rank():
    """Half the landmarks from the queries, half from the keys; inserting padding moves none of them."""
    real = torch.ones(1, 10, dtype=torch.bool)
    padded = torch.tensor([[True, False, False] + [True] * 9])  # the same ten real tokens, two pads after the first
    draws = rank_draws(12, 0, 0, 0)
    positions, valid = landmark_positions(real, 4, draws)
    moved, moved_valid = landmark_positions(padded, 4, draws)
    assert valid.all() and moved_valid.all() and len(set(positions[0].tolist())) == 4
    real_positions = torch.nonzero(padded[0])[:, 0]
    assert real_positions[positions[0]].tolist() == moved[0].tolist()
    few, few_valid = landmark_positions(real[:, :3], 5, draws)
    assert few_valid.tolist() == [[True, True, True, False, False]] and sorted(few[0, :3].tolist()) == [0, 1, 2]


def test_rank_draws_do_not_depend_on_the_length():
    long = rank_draws(3000, 7, 0, 1)
    assert torch.equal(rank_draws(10, 7, 0, 1), long[:10]) and torch.equal(rank_draws(1500, 7, 0, 1), long[:1500])


def test_landmarks_are_redrawn_in_training_and_fixed_in_evaluation():
    q, k, v = inputs(3)
    attn = skyformer(num_landmarks=8)
    first = attn(q, k, v)
    attn.train()
    trained = [attn(q, k, v) for _ in range(2)]
    attn.eval()
    assert not torch.equal(trained[0], trained[1]) and not torch.equal(trained[0], first)
    assert torch.equal(attn(q, k, v), first)
    fixed = skyformer(num_landmarks=8, redraw=False).train()
    assert torch.equal(fixed(q, k, v), fixed(q, k, v))


def test_skyformer_has_no_causal_form():
    with pytest.raises(ConfigError, match="no causal form"):
        build_attention("skyformer", causal=True)
