"""The shared linear-attention kernel: masking, normaliser guard, causal prefix sums, redraw schedule."""

import pytest
import torch

from attnbench.kernels.linear.attention import LinearKernelAttention
from attnbench.kernels.linear.contract import FeatureChunk, FeatureMap
from attnbench.kernels.linear.parallel import factored_linear_attention, linear_attention
from attnbench.kernels.linear.route import chunked_linear_attention


def naive(phi_q, phi_k, v, mask=None, causal=False):
    """Explicit N x N weights: w_ij = phi_q_i . phi_k_j over real (and, if causal, earlier) keys."""
    w = phi_q @ phi_k.transpose(-2, -1)
    n = w.shape[-1]
    if mask is not None:
        w = w * mask[:, None, None, :]
    if causal:
        w = w * torch.ones(n, n, dtype=torch.bool).tril()
    return (w @ v) / w.sum(-1, keepdim=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [1, 5, 64, 150])
def test_kernel_matches_explicit_weights(n, causal):
    g = torch.Generator().manual_seed(n)
    phi_q, phi_k = (torch.rand(2, 3, n, 6, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 3, n, 4, generator=g, dtype=torch.float64)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, (n + 1) // 2 :] = False
    out = linear_attention(phi_q, phi_k, v, mask, eps=1e-12, causal=causal)
    torch.testing.assert_close(out, naive(phi_q, phi_k, v, mask, causal))


def test_padded_keys_contribute_nothing_even_when_huge():
    g = torch.Generator().manual_seed(0)
    phi_q, phi_k, v = (torch.rand(1, 1, 6, 4, generator=g) for _ in range(3))
    mask = torch.tensor([[True] * 4 + [False] * 2])
    loud_k, loud_v = phi_k.clone(), v.clone()
    loud_k[..., 4:, :], loud_v[..., 4:, :] = 1e6, -1e6
    a = linear_attention(phi_q, phi_k, v, mask)
    b = linear_attention(phi_q, loud_k, loud_v, mask)
    torch.testing.assert_close(a, b)


def test_normaliser_guard_keeps_sign_and_finiteness():
    phi_q = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]]])  # last query: normaliser exactly 0
    phi_k = torch.tensor([[[[-2.0, 0.0], [0.0, 1e-9], [0.0, 0.0]]]])
    v = torch.ones(1, 1, 3, 1)
    out = linear_attention(phi_q, phi_k, v, eps=1e-3)
    assert torch.isfinite(out).all()
    assert out[0, 0, 0, 0].item() == pytest.approx(1.0)  # -2 / -2: negative normaliser keeps its sign
    assert out[0, 0, 1, 0].item() == pytest.approx(1e-9 / 1e-3)  # tiny positive normaliser clamped to eps
    assert out[0, 0, 2, 0].item() == 0.0


class CountingMap(FeatureMap):
    def __init__(self):
        super().__init__()
        self.num_features, self.redraws = 4, 0

    def new_feature_map(self):
        self.redraws += 1

    def forward_queries(self, x):
        return torch.nn.functional.elu(x) + 1


def test_redraw_every_n_training_steps_and_never_in_evaluation():
    attn = LinearKernelAttention(CountingMap(), redraw_every=3)
    x = torch.randn(1, 1, 5, 4)
    redraws = []
    for _ in range(7):
        attn(x, x, x)
        redraws.append(attn.feature_map.redraws)
    assert redraws == [0, 0, 0, 1, 1, 1, 2]
    attn.eval()
    for _ in range(5):
        attn(x, x, x)
    assert attn.feature_map.redraws == 2 and int(attn.training_steps) == 7
    assert attn.redraw_policy == "every 3 training steps"
    assert LinearKernelAttention(CountingMap()).redraw_policy == "never"


def _maps():
    from attnbench.baselines.elu_linear import EluFeatureMap
    from attnbench.baselines.feature_maps import FEATURE_MAPS
    from attnbench.baselines.rfa import RfaFeatureMap

    maps = [cls(6, 2, 8, seed=1).double() for cls in FEATURE_MAPS.values()]
    return maps + [EluFeatureMap(6), RfaFeatureMap(6, 2, 8, seed=1, tau=1.0, orthogonal=True).double()]


@pytest.mark.parametrize("index", range(10))
@pytest.mark.parametrize("rows", [1, 4, 64])
def test_chunked_kernel_equals_the_materialised_one(index, rows):
    """Blocks of rows (a block of padding only included) give the whole-sequence kernel's output."""
    feature_map = _maps()[index].eval()
    g = torch.Generator().manual_seed(index)
    q, k, v = (3 * torch.randn(2, 2, 11, 6, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(2, 11, dtype=torch.bool)
    mask[1, 2:7] = False  # blocks of 4: the second one of sequence 1 has no real key
    k[1, :, 2:7], v[1, :, 2:7] = 50.0, -1e6  # loud padding
    for m in (None, mask):
        expected = linear_attention(feature_map.forward_queries(q), feature_map.forward_keys(k, m), v, m)
        torch.testing.assert_close(chunked_linear_attention(feature_map, q, k, v, m, rows=rows), expected)


def test_attention_uses_the_chunked_kernel_without_gradients_only():
    """Each call's route, as the module counts it: float64 keeps the PyTorch renderings."""
    attn = LinearKernelAttention(_maps()[0]).eval()
    q = torch.randn(1, 2, 9, 6, dtype=torch.float64)
    with torch.no_grad():
        fast = attn(q, q, q)
    torch.testing.assert_close(fast, attn(q, q, q))
    assert attn.kernel_routes == {"pytorch-chunked": 1, "pytorch-factored": 1}
    causal = LinearKernelAttention(_maps()[0], causal=True).eval()
    with torch.no_grad():
        causal(q, q, q)
    assert causal.kernel_routes == {"pytorch-causal": 1}  # the causal form always runs materialised


class _EluOnlyForward(FeatureMap):
    """A map written as fast-transformers and fla write theirs: forward only, no num_features."""

    def forward(self, x):
        return torch.nn.functional.elu(x) + 1


@pytest.mark.parametrize("grad", [False, True])
def test_a_map_that_overrides_only_forward_trains_and_evaluates(grad):
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 2, 37, 16, generator=g) for _ in range(3))
    mask = torch.ones(2, 37, dtype=torch.bool)
    mask[0, 20:] = False
    attn = LinearKernelAttention(_EluOnlyForward())
    expected = naive(torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1, v, mask)
    with torch.set_grad_enabled(grad):
        out = attn(q.requires_grad_(grad), k, v, mask)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    assert attn.cost(2, 2, 37, 16)["flops"] > 0  # M measured on a row: 16
    assert list(attn.kernel_routes) == ["pytorch-factored" if grad else "pytorch-chunked"]


def test_a_map_without_features_says_what_to_implement():
    class Empty(FeatureMap):
        num_features = 4

    q = torch.randn(1, 1, 3, 4)
    for call in (
        lambda: Empty()(q),
        lambda: Empty().forward_queries(q),
        lambda: Empty().forward_keys(q),
        lambda: LinearKernelAttention(Empty())(q, q, q),
    ):
        with pytest.raises(NotImplementedError, match="implements forward"):
            call()


def test_factored_chunk_materialises_scale_and_offset():
    values = torch.tensor([[[[1.0, 2.0]]]])
    torch.testing.assert_close(
        FeatureChunk(values, scale=0.5, offset=4.0).materialise(), torch.tensor([[[[2.5, 3.0]]]])
    )
    assert FeatureChunk(values).materialise() is values


def test_cost_counts_features_and_kernel_products():
    from attnbench.baselines.elu_linear import EluFeatureMap
    from attnbench.baselines.feature_maps import FavorMap

    n, d = 1000, 8
    elu = LinearKernelAttention(EluFeatureMap(d)).cost(2, 3, n, d)
    kernel = 2 * 2 * n * d * d + 3 * n * d + n * d  # phi_k^T v, phi_q @ state; sum, normaliser; division
    assert elu == {"flops": 6 * (kernel + 2 * 4 * n * d), "bytes": 4 * 6 * n * d * 4}
    favor = LinearKernelAttention(FavorMap(d, 3, 16)).cost(1, 3, n, d)
    projections = 2 * (2 * n * 16 * d)  # omega^T x for queries and keys
    assert favor["flops"] > 3 * (projections + 2 * 2 * n * 16 * d)
    assert favor["bytes"] == 4 * 3 * n * d * 4 + 3 * 16 * d * 4  # q, k, v, out and the omegas


def test_ranges_on_threads_merge_to_the_single_thread_result():
    feature_map = _maps()[0].eval()  # favor: key stabilisers merged across ranges
    g = torch.Generator().manual_seed(5)
    q, k, v = (3 * torch.randn(2, 2, 23, 6, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(2, 23, dtype=torch.bool)
    mask[1, 5:] = False  # the later ranges of sequence 1 hold padding only
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = chunked_linear_attention(feature_map, q, k, v, mask, rows=4)
        torch.set_num_threads(3)
        split = chunked_linear_attention(feature_map, q, k, v, mask, rows=4)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(split, alone)


def test_maps_without_the_out_argument_still_run_chunked():
    """A plugin map written against the older interface (query_chunk(x) only) gets no scratch buffer."""

    class Squares(FeatureMap):
        num_features = 6

        def query_chunk(self, x):
            return FeatureChunk(x * x + 0.1)

    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 13, 6, generator=g, dtype=torch.float64) for _ in range(3))
    expected = linear_attention(q * q + 0.1, k * k + 0.1, v)
    torch.testing.assert_close(chunked_linear_attention(Squares(), q, k, v, rows=4), expected)


def test_scratch_is_reused_per_thread_and_grows():
    from attnbench.kernels.cpu_threads import scratch

    first = scratch((2, 3), torch.float32, torch.device("cpu"))
    again = scratch((3, 2), torch.float32, torch.device("cpu"))
    assert again.data_ptr() == first.data_ptr()
    bigger = scratch((4, 5), torch.float32, torch.device("cpu"))
    assert bigger.shape == (4, 5) and bigger.is_contiguous()
    assert scratch((2, 2), torch.float64, torch.device("cpu")).dtype == torch.float64


@pytest.mark.parametrize("index", range(10))
def test_factored_training_path_equals_the_materialised_one_with_gradients(index):
    """Row weights, scale and offset applied to the state give the output and input gradients of phi = s (v w + o)."""
    feature_map = _maps()[index].train()
    g = torch.Generator().manual_seed(10 + index)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[0, 6:] = False
    grads = []
    for factored in (True, False):
        q, k, v = (
            torch.randn(2, 2, 9, 6, generator=torch.Generator().manual_seed(i), dtype=torch.float64, requires_grad=True)
            for i in range(3)
        )
        if factored:
            out = factored_linear_attention(feature_map.query_chunk(q), feature_map.key_chunk(k, mask), v, mask)
        else:
            out = linear_attention(feature_map.forward_queries(q), feature_map.forward_keys(k, mask), v, mask)
        out.backward(torch.randn(out.shape, generator=g.manual_seed(0), dtype=torch.float64))
        grads.append((out.detach(), q.grad, k.grad, v.grad))
    for fast, slow in zip(*grads):
        torch.testing.assert_close(fast, slow)


def test_derived_weights_are_kept_across_calls_until_their_source_changes():
    from attnbench.baselines.feature_maps import FavorMap

    fm = FavorMap(8, 2, 16, seed=0).eval()
    x = torch.randn(1, 2, 5, 8)
    first = fm.native_spec(x).weights
    assert fm.native_spec(x).weights is first  # kept: no copy per call
    fm.new_feature_map()  # a redraw writes the omegas in place
    redrawn = fm.native_spec(x).weights
    assert redrawn is not first and not torch.equal(redrawn, first)
    assert fm.native_spec(x.double()).weights.dtype == torch.float64  # the key: another dtype is another value
    fm.load_state_dict(FavorMap(8, 2, 16, seed=3).state_dict())
    torch.testing.assert_close(fm.native_spec(x).weights, fm.omega.transpose(-2, -1) * 8**-0.25)
    fm.omega.data = fm.omega.detach() * 2  # new storage
    torch.testing.assert_close(fm.native_spec(x).weights, fm.omega.transpose(-2, -1) * 8**-0.25)


def test_derived_weights_that_carry_a_gradient_are_made_afresh():
    from attnbench.baselines.rfa import RfaFeatureMap

    fm = RfaFeatureMap(8, 2, 4, seed=0, tau=1.0, orthogonal=True).eval()
    x = torch.randn(1, 2, 5, 8)
    with torch.no_grad():
        kept = fm.native_spec(x).weights
        assert fm.native_spec(x).weights is kept
    traced = fm.native_spec(x).weights  # sigma takes gradients: a fresh, differentiable tensor
    assert traced is not kept and traced.requires_grad
    traced.sum().backward()
    assert fm.sigma.grad is not None
    with torch.no_grad():
        fm.sigma.mul_(2)  # an optimizer step
        torch.testing.assert_close(fm.native_spec(x).weights, 2 * kept)
