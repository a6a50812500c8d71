"""The fused CPU kernels (harness/kernels/native): the same attention as the exact formula, and a safe fallback."""

import contextlib
import copy
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnbench.baselines.elu_linear import EluFeatureMap
from attnbench.baselines.feature_maps import FEATURE_MAPS
from attnbench.baselines.random_feature_map import MapForm
from attnbench.baselines.rfa import RfaFeatureMap
from attnbench.kernels import native
from attnbench.kernels.linear.contract import FeatureMap
from attnbench.kernels.linear.fused import padded_queries_unread
from attnbench.kernels.linear.route import chunked_linear_attention

ROOT = Path(__file__).resolve().parents[1]
# every random-feature map's fused form, as its class declares it (`native`): a new map is tested here as it is added
PAPER_MAPS = tuple(kind for kind, cls in FEATURE_MAPS.items() if cls.native and cls.native.paper)
SCALED_MAPS = tuple(kind for kind, cls in FEATURE_MAPS.items() if cls.native and cls.native.scaled)
needs_native = pytest.mark.skipif(native.library() is None, reason=f"native kernels {native.status()}")


def _maps(d: int) -> dict[str, FeatureMap]:
    maps = {f"random-{kind}": FEATURE_MAPS[kind](d, 3, 32, seed=2) for kind in SCALED_MAPS}
    maps["elu-linear"] = EluFeatureMap(d)
    for kind in PAPER_MAPS:  # the paper's forms (l1-renormalised keys; cos2 with phases), tau and elu bias off 1, 0
        maps[f"paper-{kind}"] = FEATURE_MAPS[kind](
            d, 3, 32, seed=2, orthogonal=kind == "porf-softplus", form=MapForm(temperature=1.5, elu_bias=0.2)
        )
    maps["rfa"] = RfaFeatureMap(d, 3, 16, seed=2, tau=1.0, orthogonal=True)
    return {name: m.eval() for name, m in maps.items()}


def exact(feature_map: FeatureMap, q, k, v, mask):
    """The O(N^2) formula in float64: w_ij = phi(q_i) . phi(k_j) over real keys, out = w v / w 1."""
    fm = feature_map.double()
    try:
        phi_q = fm.forward_queries(q.double())
        phi_k = fm.forward_keys(k.double(), mask)
    finally:
        feature_map.float()
    w = phi_q @ phi_k.transpose(-2, -1)
    if mask is not None:
        w = w * mask[:, None, None, :]
    return (w @ v.double()) / w.sum(-1, keepdim=True)


def _inputs(seed: int, n: int, d: int, scale: float = 1.0, loud: bool = True):
    """q, k, v (2, 3, n, d) and a mask padding the last 2/3 of sequence 1, whose keys and values are loud."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (scale * torch.randn(2, 3, n, d, generator=g) for _ in range(3))
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, n // 3 :] = False
    if loud:
        k[1, :, n // 3 :], v[1, :, n // 3 :] = 40.0, -1e6  # padding must contribute nothing
    return q, k, v, mask


@needs_native
@pytest.mark.parametrize("d", [16, 32, 64])
@pytest.mark.parametrize(
    "name",
    [*(f"random-{kind}" for kind in SCALED_MAPS), "elu-linear", "rfa", *(f"paper-{kind}" for kind in PAPER_MAPS)],
)
def test_fused_kernel_equals_the_exact_formula(name, d, monkeypatch):
    calls = []
    real_attention = native.attention
    monkeypatch.setattr(native, "attention", lambda *a: calls.append(1) or real_attention(*a))
    feature_map = _maps(d)[name]
    # trig features are not positive: inputs of small norm keep the estimated kernel, the normaliser, away from 0
    scale = 0.3 if name == "random-trig" else 1.0
    eps = 1e-30 if name == "paper-favor" else 1e-6  # the paper favor's guard (RandomFeaturesConfig.guard)
    for loud, m in ((False, None), (True, _inputs(d, 203, d)[3])):
        q, k, v, _ = _inputs(d, 203, d, scale, loud)
        out = chunked_linear_attention(feature_map, q, k, v, m, eps)
        expected = exact(feature_map, q, k, v, m)
        assert (out.double() - expected).abs().max() <= 1e-4 * expected.abs().max()
        torch.testing.assert_close(
            out, chunked_linear_attention(feature_map, q, k, v, m, eps, rows=64), rtol=1e-4, atol=1e-5
        )
    assert calls, "the fused kernel did not run"


@needs_native
def test_favor_key_stabiliser_is_merged_exactly_across_blocks_and_threads():
    """Key norms growing along the sequence raise the running maximum block after block (and per thread range)."""
    feature_map = _maps(64)["random-favor"]
    q, k, v, mask = _inputs(7, 517, 64)
    k = k * torch.linspace(0.2, 3.0, 517)[:, None]  # exp(|k|^2) spans hundreds of orders of magnitude
    threads = torch.get_num_threads()
    try:
        for count in (1, 3):
            torch.set_num_threads(count)
            out = chunked_linear_attention(feature_map, q, k, v, mask)
            expected = exact(feature_map, q, k, v, mask)
            assert torch.isfinite(out).all()
            assert (out.double() - expected).abs().max() <= 1e-4 * expected.abs().max()
    finally:
        torch.set_num_threads(threads)


@needs_native
def test_a_sequence_of_padding_only_gives_what_the_pytorch_path_gives():
    feature_map = _maps(32)["random-favor"]
    q, k, v, mask = _inputs(3, 40, 32)
    mask[1] = False
    out = chunked_linear_attention(feature_map, q, k, v, mask)
    torch.testing.assert_close(out, chunked_linear_attention(feature_map, q, k, v, mask, rows=16))


@needs_native
def test_unsupported_shapes_and_dtypes_fall_back_to_pytorch(monkeypatch):
    monkeypatch.setattr(native, "attention", lambda *a: pytest.fail("the fused kernel ran"))
    feature_map = _maps(24)["random-favor"]  # value width 24: not a multiple of 16
    q, k, v, mask = _inputs(1, 50, 24)
    out = chunked_linear_attention(feature_map, q, k, v, mask)
    assert (out.double() - exact(feature_map, q, k, v, mask)).abs().max() <= 1e-4
    softplus = FEATURE_MAPS["softplus"](32, 3, 16).eval()  # no fused form
    q, k, v, mask = _inputs(1, 50, 32)
    chunked_linear_attention(softplus, q, k, v, mask)
    chunked_linear_attention(_maps(32)["random-favor"].double(), q.double(), k.double(), v.double(), mask)


def _status_in_subprocess(**env: str) -> str:
    code = "from attnbench.kernels import native; print(native.status())"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True, env={**os.environ, **env}
    )
    return result.stdout.strip()


def test_disabled_or_unbuildable_kernels_report_why(tmp_path):
    assert _status_in_subprocess(ATTNBENCH_NATIVE="0") == "off: disabled by ATTNBENCH_NATIVE=0"
    broken = tmp_path / "broken-cxx"
    broken.write_text("#!/bin/sh\necho 'broken-cxx 1.0'; [ \"$1\" = --version ] || { echo nope >&2; exit 1; }\n")
    broken.chmod(0o755)
    status = _status_in_subprocess(CXX=str(broken), ATTNBENCH_CACHE=str(tmp_path / "cache"))
    assert status.startswith("off: build failed") and "nope" in status
    assert not list((tmp_path / "cache").rglob("*.so"))  # nothing half-built left behind


@needs_native
def test_attention_modules_take_the_fused_path_without_gradients():
    from attnbench.registry import build_attention

    q, k, v, mask = _inputs(4, 100, 64)
    for name in ("performer", "elu-linear", "rfa", "coulomb"):
        attn = build_attention(name, num_heads=3, head_dim=64).eval()
        with torch.no_grad():
            fast = attn(q, k, v, mask)
        torch.testing.assert_close(fast, attn(q, k, v, mask), rtol=1e-3, atol=1e-4)  # the training path


@needs_native
@pytest.mark.parametrize("n, landmarks", [(256, 64), (203, 16), (1000, 32)])
def test_fused_nystromformer_equals_its_pytorch_forward(n, landmarks, monkeypatch):
    """Column-stabilised landmark sums, softmax over the landmarks, the pinv mix and the convolution over V in the
    query pass: the same output as the differentiable PyTorch forward, with and without padding, on 1 and 2 threads."""
    from attnbench.registry import build_attention

    calls = []
    real_columns = native.softmax_columns
    monkeypatch.setattr(native.nystrom, "softmax_columns", lambda *a: calls.append(1) or real_columns(*a))
    attn = build_attention("nystromformer", num_heads=3, head_dim=64, num_landmarks=landmarks).eval()
    q, k, v, mask = _inputs(n, n, 64)
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            for m in (None, mask):
                with torch.no_grad():
                    fast = attn(q, k, v, m)
                expected = _pytorch_nystromformer(attn, q, k, v, m)
                torch.testing.assert_close(fast, expected, rtol=1e-4, atol=1e-4 * expected.abs().max().item())
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 4  # both masks on 1 and 2 threads


def _pytorch_nystromformer(attn, q, k, v, mask):
    """attn(q, k, v, mask) with gradients through the PyTorch path (the fused kernels declined)."""
    from attnbench.baselines.nystromformer import NystromAttention

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(NystromAttention, "choose_route", staticmethod(lambda *args: "pytorch"))
        out = attn(q, k, v, mask)
    assert attn.kernel_routes.get("pytorch")
    return out


@needs_native
@pytest.mark.parametrize("n, landmarks, padded", [(128, 16, False), (200, 32, False), (200, 32, True)])
def test_fused_nystromformer_training_equals_autograd_in_value_and_gradients(n, landmarks, padded):
    """The training path through LandmarkValues and LandmarkQueries (softmax sums over keys and over landmarks with
    their fused backwards) against autograd through the PyTorch path: output and the gradients of q, k, v and the
    convolution's taps, with landmarks dividing n and not, with loud padding (every landmark still has tokens), on
    1 and 2 threads. The pinv's backward amplifies rounding, so each is held to the float64 PyTorch path: no
    further from it than twice the float32 PyTorch path is, plus a float32 rounding of the largest value."""
    from attnbench.registry import build_attention

    attn = build_attention("nystromformer", num_heads=3, head_dim=64, num_landmarks=landmarks)
    q, k, v, mask = _inputs(n, n, 64, loud=padded)
    mask = mask if padded else None
    g = torch.randn(q.shape, generator=torch.Generator().manual_seed(5))
    calls = []
    real_apply = native.LandmarkValues.apply

    def results(module, fused: bool, dtype=torch.float32) -> list:
        leaves = [t.to(dtype, copy=True).requires_grad_() for t in (q, k, v)]
        module.zero_grad()
        out = module(*leaves, mask) if fused else _pytorch_nystromformer(module, *leaves, mask)
        out.backward(g.to(dtype))
        return [out.detach(), *(t.grad for t in leaves), module.conv.weight.grad.clone()]

    exact = results(copy.deepcopy(attn).double(), False, torch.float64)
    plain = results(attn, False)
    threads = torch.get_num_threads()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(native.LandmarkValues, "apply", lambda *a: calls.append(1) or real_apply(*a))
            for count in (1, 2):
                torch.set_num_threads(count)
                for name, got, base, truth in zip(["out", "dq", "dk", "dv", "dw"], results(attn, True), plain, exact):
                    error, base_error = (got.double() - truth).abs().max(), (base.double() - truth).abs().max()
                    assert error <= 2 * base_error + 1e-6 * truth.abs().max(), (name, float(error), float(base_error))
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 2


@needs_native
def test_fused_nystromformer_leaves_degenerate_padding_to_pytorch(monkeypatch):
    """A sequence without real keys (softmax over nothing) is the PyTorch path's to define."""
    from attnbench.registry import build_attention

    monkeypatch.setattr(native.nystrom, "softmax_columns", lambda *a: pytest.fail("the fused kernel ran"))
    attn = build_attention("nystromformer", num_heads=3, head_dim=64, num_landmarks=16).eval()
    q, k, v, mask = _inputs(2, 64, 64)
    mask[1] = False
    with torch.no_grad():
        assert torch.isfinite(attn(q, k, v, mask)).all()


@needs_native
def test_segment_means_equal_torch_means():
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, 96, 32, generator=g) for _ in range(2))
    for threads in (1, 3):
        q_means, k_means = native.segment_means(q, k, 12, threads)
        torch.testing.assert_close(q_means, q.view(2, 3, 12, 8, 32).mean(dim=3))
        torch.testing.assert_close(k_means, k.view(2, 3, 12, 8, 32).mean(dim=3))


@needs_native
def test_the_kernels_exp_is_accurate_to_a_float_rounding():
    """Every feature exp in the kernels against exp in float64: relative error under 1.2e-7 over the normal range
    (float32 itself rounds to 6e-8; a degree-5 polynomial, at 1.8e-7, would fail)."""
    x = torch.linspace(-87.0, 88.0, 2**20)
    got, exact = native.exp(x).double(), torch.exp(x.double())
    assert ((got - exact).abs() / exact).max().item() < 1.2e-7
    assert native.exp(torch.full((16,), -1e4)).max().item() < 1e-37  # far below the range: (nearly) zero


def _gradients(attn, q, k, v, mask, g):
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    out = attn(q, k, v, mask)
    out.backward(g)
    return out.detach(), q.grad, k.grad, v.grad


@needs_native
@pytest.mark.parametrize(
    "name, options",
    [
        ("performer", {}),
        ("elu-linear", {}),
        ("random-features", {"feature_map": "elu", "form": "scaled"}),
        ("random-features", {"feature_map": "trig"}),
        *(("random-features", {"feature_map": kind}) for kind in PAPER_MAPS),
        ("random-features", {"feature_map": "elu", "elu_bias": -0.5, "temperature": 0.7}),
        ("coulomb", {"feature_map": "softmaxfeat"}),
    ],
)
def test_fused_training_path_equals_autograd_in_value_and_gradients(name, options, monkeypatch):
    """The fused attention with its hand-written backward against autograd through the factored PyTorch path, with
    padding, on 1 and 3 threads; with the features kept from the forward and recomputed in the backward."""
    from attnbench.registry import build_attention

    attn = build_attention(name, num_heads=3, head_dim=32, **options).eval()
    for p in attn.parameters():
        p.requires_grad_(False)  # the Coulomb particles as phase B holds them: frozen
    scale = 0.3 if options.get("feature_map") == "trig" else 1.0
    g = torch.randn(2, 3, 300, 32, generator=torch.Generator().manual_seed(1))
    calls = []
    real_apply = native.Attention.apply
    monkeypatch.setattr(native.Attention, "apply", lambda *a: calls.append(1) or real_apply(*a))
    threads = torch.get_num_threads()
    try:
        for count in (1, 3):
            torch.set_num_threads(count)
            for loud in (False, True):  # loud padding only where it is masked
                q, k, v, mask = _inputs(9, 300, 32, scale, loud)
                m = mask if loud else None
                fused = _gradients(attn, q, k, v, m, g)
                with monkeypatch.context() as patch:
                    patch.setattr(native.linear, "KEEP_FEATURES_BYTES", 0)
                    recomputed = _gradients(attn, q, k, v, m, g)
                    patch.setattr(native, "supports_backward", lambda *a: False)
                    reference = _gradients(attn, q, k, v, m, g)
                for got, again, expected in zip(fused, recomputed, reference):
                    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5 * expected.abs().max().item())
                    assert torch.equal(got, again)  # the kept features are the recomputed ones, bit for bit
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 8


@needs_native
@pytest.mark.parametrize(
    "name, options",
    [
        ("performer", {}),
        ("random-features", {"feature_map": "softplus"}),
        ("random-features", {"feature_map": "cos2"}),
        ("random-features", {"feature_map": "favor"}),
    ],
)
def test_unread_padded_query_rows_are_skipped_and_nothing_else_changes(name, options):
    """Within `padded_queries_unread` (the model packs real tokens) the kernels skip query rows past each sequence's
    last real key: the outputs there are 0, and the real rows' outputs and every gradient are the same bits as
    when they are computed (gradients come back 0 on padded rows, as the model's packing sends them)."""
    from attnbench.registry import build_attention

    attn = build_attention(name, num_heads=3, head_dim=32, **options)
    q, k, v, mask = _inputs(6, 90, 32, loud=False)
    g = torch.randn(q.shape, generator=torch.Generator().manual_seed(2)) * mask[:, None, :, None]
    runs = []
    for unread in (False, True):
        with padded_queries_unread() if unread else contextlib.nullcontext():
            with torch.no_grad():
                forward = attn(q, k, v, mask)
            runs.append((forward, *_gradients(attn, q, k, v, mask, g)))
    real = mask[:, None, :, None].expand_as(q)
    (f0, o0, *grads0), (f1, o1, *grads1) = runs
    for a, b in ((f0, f1), (o0, o1)):
        assert torch.equal(a[real], b[real]) and not b[~real].any()
    for a, b in zip(grads0, grads1):
        assert torch.equal(a, b)


@needs_native
def test_every_call_records_the_route_it_took():
    """`kernel_routes` counts what ran: the fused kernels with and without gradients, PyTorch with them off or
    where the kernels cannot take the call (float64, a projection taking gradients), and Nystromformer's."""
    from attnbench.registry import build_attention

    q, k, v, mask = _inputs(3, 64, 64)
    cases = [
        ("random-features", {"feature_map": "cos2"}, "native", "native-training"),
        ("performer", {}, "native", "native-training"),
        ("nystromformer", {"num_landmarks": 16}, "native", "native-training"),
        ("rfa", {}, "native", "pytorch-factored"),
    ]  # RFA's learned scale takes gradients
    for name, options, evaluated, trained in cases:
        attn = build_attention(name, num_heads=3, head_dim=64, **options)
        with torch.no_grad():
            attn(q, k, v, mask)
        attn(q, k, v.requires_grad_(), mask)
        v.requires_grad_(False)
        with native.turned_off(), torch.no_grad():
            attn(q, k, v, mask)
        attn.double()(q.double(), k.double(), v.double(), mask)
        pytorch = "pytorch" if name == "nystromformer" else "pytorch-factored"
        expected = {evaluated: 1, pytorch: 1, "pytorch-chunked": 1}
        expected[trained] = expected.get(trained, 0) + 1
        assert attn.kernel_routes == expected, name


@needs_native
@pytest.mark.parametrize("kind", PAPER_MAPS)
def test_paper_maps_match_the_pytorch_path_where_the_normaliser_guard_acts(kind):
    """Inputs loud enough (and tau small enough) that softmaxfeat's features are one-hot and rows match no key:
    the guard then acts on the l1-weighted denominator, which the kernel forms as the PyTorch path does."""
    from attnbench.registry import build_attention

    attn = build_attention(
        "random-features", num_heads=3, head_dim=32, feature_map=kind, num_features=48, temperature=0.5
    )
    q, k, v, mask = _inputs(4, 40, 32, scale=10.0)
    g = torch.randn(q.shape, generator=torch.Generator().manual_seed(3))
    fused = _gradients(attn, q, k, v, mask, g)
    with native.turned_off():
        reference = _gradients(attn, q, k, v, mask, g)
    for got, expected in zip(fused, reference):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5 * expected.abs().max().item())


@needs_native
def test_rfa_keeps_autograd_for_its_learned_scale(monkeypatch):
    """RFA normalises its inputs and learns sigma: the kernels do not take it with gradients."""
    from attnbench.registry import build_attention

    monkeypatch.setattr(native.Attention, "apply", lambda *a: pytest.fail("the fused training path ran"))
    q, k, v, mask = _inputs(2, 64, 64)
    attn = build_attention("rfa", num_heads=3, head_dim=64)
    params = [p for p in attn.parameters() if p.requires_grad]
    attn(q.requires_grad_(), k, v, mask).sum().backward()
    assert params and all(p.grad is not None for p in params)


@needs_native
@pytest.mark.parametrize("kind", PAPER_MAPS)
@pytest.mark.parametrize("heads", [1, 3])
def test_particles_taking_gradients_get_them_from_the_kernels(kind, heads, monkeypatch):
    """Phase A: the Coulomb particles (one head's shared by all, or one set per head) take gradients through the
    fused kernels' backward, which equal autograd through the PyTorch path, on 1 and 2 threads with padding;
    q takes its gradient too (train_norm_value's route into the layers below)."""
    from attnbench.registry import build_attention

    attn = build_attention("coulomb", num_heads=heads, head_dim=32, feature_map=kind, num_features=32, seed=1)
    q, k, v, mask = _inputs(7, 150, 32, loud=False)
    g = torch.randn(q.shape, generator=torch.Generator().manual_seed(4)) * mask[:, None, :, None]
    calls = []
    real_apply = native.Attention.apply
    monkeypatch.setattr(native.Attention, "apply", lambda *a: calls.append(1) or real_apply(*a))

    def grads(off: bool) -> list:
        attn.zero_grad()
        qq = q.clone().requires_grad_()
        with native.turned_off(off):
            (attn(qq, k, v, mask) * g).sum().backward()
        return [attn.feature_map.omega.grad.clone(), qq.grad]

    threads = torch.get_num_threads()
    try:
        reference = grads(True)
        for count in (1, 2):
            torch.set_num_threads(count)
            for got, expected in zip(grads(False), reference):
                torch.testing.assert_close(got, expected, rtol=1e-4, atol=2e-5 * expected.abs().max().item())
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 2


@pytest.mark.skipif(os.uname().machine != "x86_64" or native.library() is None, reason="an x86-64 build check")
def test_a_build_without_avx512_computes_the_same_bits(tmp_path):
    """The kernels built for AVX2 machines (x86-64-v3: no AVX-512, so 8-lane loops for the feature maps, 32-byte
    sub-tiles, 8 x 8 transposes) against this machine's build, on every fused attention evaluated and trained with
    padding (tests/native_probe.py): the same bits, since each element sees the same operations in the same order.
    The one exception is exp below -87.3, where AVX-512's vscalefps goes subnormal and the portable exp stops at
    exp(-87.3) (both under 1.2e-38)."""

    def probe(name: str, *args: str, **env: str) -> dict:
        out = tmp_path / f"{name}.pt"
        result = subprocess.run(
            [sys.executable, str(ROOT / "tests" / "native_probe.py"), str(out), *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, **env},
        )
        assert result.returncode == 0, result.stderr[-2000:]
        return torch.load(out)

    here = probe("native")
    avx2 = probe("avx2", "--march", "x86-64-v3", ATTNBENCH_CACHE=str(tmp_path / "cache"))
    assert here.keys() == avx2.keys() and len(here) > 60
    x = torch.linspace(-100.0, 88.0, 4096)  # the probe's exp inputs
    normal = x >= -87.3
    assert torch.equal(here["exp"][normal], avx2["exp"][normal])
    assert float((here["exp"][~normal] - avx2["exp"][~normal]).abs().max()) <= 1.3e-38
    differ = [name for name in here if name != "exp" and not torch.equal(here[name], avx2[name])]
    assert not differ, differ


@pytest.mark.skipif(native.library() is None or not hasattr(os, "fork"), reason="needs the kernels and fork")
def test_a_call_never_waits_for_a_helper_thread_that_does_not_arrive():
    """The caller finishes the work alone when no helper comes: in a forked child the pool's helpers are gone
    (fork copies only the calling thread), yet a call on 2 threads returns, bitwise equal to the parent's."""
    q, k, v, _ = _inputs(2, 700, 64)
    spec = native.NativeSpec("favor", 0.1 * torch.randn(1, 64, 128, generator=torch.Generator().manual_seed(3)))
    parent = native.attention(spec, q, k, v, None, 1e-6, threads=2)  # the pool and its helpers made here
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        child = native.attention(spec, q, k, v, None, 1e-6, threads=2)
        os.write(write, b"1" if torch.equal(child, parent) else b"0")
        os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], 60.0)
    answer = os.read(read, 1) if ready else b""
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert answer == b"1", "the forked call hung (waited for a helper) or differed"


@needs_native
@pytest.mark.parametrize(
    "name, options",
    [
        ("performer", {}),
        ("elu-linear", {}),
        ("nystromformer", {}),
        ("random-features", {"feature_map": "softplus"}),
        ("random-features", {"feature_map": "cos2"}),
    ],
)
def test_results_are_bitwise_the_same_for_every_thread_count_and_run(name, options):
    """Threads take units of work as they finish, but every sum is split into groups fixed by the length alone
    and merged in order: outputs (and the fused training path's gradients) are identical on 1, 2 and 3 threads
    and across repeats, with and without padding."""
    from attnbench.registry import build_attention

    attn = build_attention(name, num_heads=3, head_dim=64, **options).eval()
    q, k, v, mask = _inputs(5, 1000, 64)
    g = torch.randn(q.shape, generator=torch.Generator().manual_seed(2))
    threads = torch.get_num_threads()
    results = {True: [], False: []}
    try:
        for count in (1, 2, 3, 2):
            torch.set_num_threads(count)
            for padded in (True, False):
                m = mask if padded else None
                with torch.no_grad():
                    forward = attn(q, k, v, m)
                results[padded].append((forward, *_gradients(attn, q, k, v, m, g)))
    finally:
        torch.set_num_threads(threads)
    for padded, runs in results.items():
        for index, other in enumerate(runs[1:], start=1):
            for position, (a, b) in enumerate(zip(runs[0], other)):
                assert torch.equal(a, b), (padded, index, position)
        for a, b in zip(runs[1], runs[3]):  # both on 2 threads
            assert torch.equal(a, b)


@needs_native
def test_fused_pinv_steps_match_the_torch_iteration_in_value_and_gradient():
    """Nystromformer's Newton-Schulz pseudo-inverse through `native.PinvSteps`: the torch loop's iterates and
    gradients (to rounding), and, iterated on, the Moore-Penrose inverse that torch.linalg.pinv computes by SVD."""
    from attnbench.baselines.nystromformer import iterative_pinv

    g = torch.Generator().manual_seed(0)
    a = torch.softmax(2 * torch.randn(2, 3, 64, 64, generator=g), dim=-1)  # row-stochastic, as kernel_2
    out_grad = torch.randn(2, 3, 64, 64, generator=g)
    for iterations in (1, 6):
        fast_a, slow_a = a.clone().requires_grad_(), a.clone().requires_grad_()
        fast, slow = iterative_pinv(fast_a, iterations, threads=2), iterative_pinv(slow_a, iterations)
        assert fast.grad_fn is not None and "PinvSteps" in type(fast.grad_fn).__name__
        torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-5)
        fast.backward(out_grad)
        slow.backward(out_grad)
        torch.testing.assert_close(fast_a.grad, slow_a.grad, rtol=1e-4, atol=1e-4 * float(slow_a.grad.abs().max()))
    exact = torch.linalg.pinv(a.double())
    converged = iterative_pinv(a, 40, threads=2).double()
    assert float((converged - exact).norm() / exact.norm()) < 1e-3


def _good_calls():
    """One valid call of every kernel wrapper, by name, as (function, args)."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 3, 32, 16, generator=g) for _ in range(3))
    w = torch.randn(3, 16, 32, generator=g)
    real = torch.ones(2, 32, dtype=torch.uint8)
    spec = native.NativeSpec("favor", w)
    kv, ksum = torch.randn(6, 32, 16, generator=g), torch.rand(6, 32, 1, generator=g) + 1
    land = torch.randn(2, 3, 16, 16, generator=g)
    return {
        "attention": (native.attention, [spec, q, k, v, real, 1e-6, 1]),
        "write_queries": (
            native.write_queries,
            [spec, q, kv, ksum, None, 1e-6, torch.empty(2, 3, 32, 16), (v, torch.randn(3, 5, generator=g)), 1],
        ),
        "softmax_columns": (native.softmax_columns, [k, w, v, real, 1]),
        "segment_means": (native.segment_means, [q, k, 8, 1]),
        "sequence_conv": (native.sequence_conv, [v, torch.randn(3, 5, generator=g), 1]),
        "sequence_conv_weight_grad": (native.sequence_conv_weight_grad, [v.clone(), v, 5, 1]),
        "landmark_values": (native.landmark_values, [k, v, land, real, 1]),
        "landmark_queries": (native.landmark_queries, [q, land, torch.randn(2, 3, 16, 16, generator=g), 1]),
        "exp": (native.exp, [torch.randn(64, generator=g)]),
        "pinv": (native.PinvSteps.apply, [torch.eye(16) + 0.1, torch.eye(16), 3, 1]),
    }


# (kernel, argument index, replacement, what the message names): each must be refused before the kernel runs
_BAD_CALLS = [
    ("attention", 1, lambda q: q[:, :2], "shape"),  # k and v have 3 heads
    ("attention", 2, lambda k: k.transpose(-2, -1).contiguous().transpose(-2, -1), "strides"),
    ("attention", 3, lambda v: v.double(), "float64"),
    ("attention", 3, lambda v: torch.randn(2, 3, 32, 24), "width"),
    ("attention", 4, lambda real: real.bool(), "torch.bool"),
    ("attention", 4, lambda real: real[:1], "key mask"),
    ("attention", 0, lambda spec: native.NativeSpec("favor", torch.randn(2, 16, 32)), "num_heads"),
    ("attention", 0, lambda spec: native.NativeSpec("favor", torch.randn(3, 16, 24)), "multiple of 16"),
    ("attention", 0, lambda spec: native.NativeSpec("favor", torch.randn(3, 8, 32)), "projection"),
    ("attention", 6, lambda threads: 0, "threads"),
    ("attention", 0, lambda spec: native.NativeSpec("cos2", torch.randn(3, 16, 32)), "phases"),
    ("attention", 0, lambda spec: native.NativeSpec("cos2", torch.randn(3, 16, 32), phase=torch.rand(3, 16)), "phases"),
    ("attention", 0, lambda spec: native.NativeSpec("softplus", None), "projection"),
    ("write_queries", 2, lambda kv: kv[:3], "kv"),
    ("write_queries", 3, lambda ksum: ksum[:, :16], "ksum"),
    ("write_queries", 6, lambda out: torch.empty(2, 3, 31, 16), "out"),
    ("write_queries", 7, lambda conv: (conv[0], conv[1][:1]), "num_heads"),
    ("write_queries", 7, lambda conv: (conv[0][:, :, :16], conv[1]), "convolved"),
    ("softmax_columns", 1, lambda w: torch.randn(3, 16, 20), "multiple of 16"),
    ("softmax_columns", 2, lambda v: v[:, :, :16], "shape"),
    ("segment_means", 2, lambda segments: 5, "divide"),
    ("sequence_conv", 1, lambda w: w[:1], "shape"),
    ("sequence_conv", 0, lambda v: v[:, :, :, :8], "width"),
    ("sequence_conv_weight_grad", 0, lambda g: g[:1], "gradient"),
    ("landmark_values", 2, lambda land: land[:, :2], "q_land"),
    ("landmark_values", 2, lambda land: torch.randn(2, 3, 12, 16), "multiple of 16"),
    ("landmark_queries", 2, lambda mixed: mixed[:, :, :8], "mixed"),
    ("exp", 0, lambda x: x[:40], "multiple of 16"),
    ("pinv", 0, lambda a: torch.eye(12), "multiple of 16"),
    ("pinv", 1, lambda z: torch.eye(32), "z0"),
]


@needs_native
def test_every_kernel_wrapper_runs_on_valid_tensors():
    for _name, (fn, args) in _good_calls().items():
        fn(*args)  # no error: the checks accept what the attentions pass


@needs_native
@pytest.mark.parametrize("kernel_name, index, bad, named", _BAD_CALLS)
def test_the_native_boundary_refuses_shapes_strides_and_dtypes_it_cannot_take(
    kernel_name, index, bad, named, monkeypatch
):
    monkeypatch.setattr(native.runtime, "call", lambda *a: pytest.fail("the kernel ran"))
    fn, args = _good_calls()[kernel_name]
    args[index] = bad(args[index])
    with pytest.raises(native.NativeShapeError, match=named):
        fn(*args)


@pytest.mark.parametrize("on", [True, False])
def test_nystromformer_shares_one_heads_convolution_across_heads_on_both_paths(on):
    """The issue's call: head_dim=16, num_landmarks=32 on 4 heads, built with num_heads=1."""
    if on and native.library() is None:
        pytest.skip(f"native kernels {native.status()}")
    from attnbench.registry import build_attention

    attn = build_attention("nystromformer", head_dim=16, num_landmarks=32).eval()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 128, 16, generator=g) for _ in range(3))
    with torch.no_grad(), native.turned_off(not on):
        out = attn(q, k, v)
        heads = [attn(q[:, i : i + 1], k[:, i : i + 1], v[:, i : i + 1]) for i in range(4)]  # one head each: no sharing
    torch.testing.assert_close(out, torch.cat(heads, dim=1), rtol=1e-5, atol=1e-5)
    assert out.abs().max() < 10


def test_the_cpp_kind_ids_and_abi_come_from_the_python_table():
    """The C++ source holds no kind ids or ABI number of its own: both are compiler definitions made from
    KIND_TABLE and ABI, and every enumerator of the table is one the source uses."""
    import re

    from attnbench.kernels import native

    source = native.SOURCE.read_text()
    assert "enum Kind { ATTNBENCH_KIND_ENUM };" in source and "return ATTNBENCH_ABI;" in source
    definitions = dict(flag[2:].split("=", 1) for flag in native.generated_definitions())
    assert definitions["ATTNBENCH_ABI"] == str(native.ABI)
    enum = dict(item.split("=") for item in definitions["ATTNBENCH_KIND_ENUM"].split(","))
    assert {cpp: int(i) for cpp, i in enum.items()} == {cpp: native.KINDS[name] for name, cpp in native.KIND_TABLE}
    assert all(re.search(rf"\b{cpp}\b", source.replace("ATTNBENCH_KIND_ENUM", "")) for cpp in enum)
    assert set(native.FLAGS) >= set(native.generated_definitions())
