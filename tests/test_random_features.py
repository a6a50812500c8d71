"""Vanilla random-feature maps: definitions, kernel estimates, fixed seeded omegas, config checks."""

import math

import pytest
import torch

from attnbench.baselines.feature_maps import FEATURE_MAPS, EluMap
from attnbench.baselines.random_projections import orthogonal_gaussian, seeded_generator
from attnbench.errors import ConfigError
from attnbench.kernels import native
from attnbench.registry import build_attention


def feature_values(kind: str, x: torch.Tensor, omega: torch.Tensor, **options) -> torch.Tensor:
    """The scaled form's features of x (B, H, N, d) for the given omegas (H, M, d), by the class of `kind`."""
    return FEATURE_MAPS[kind](x.shape[-1], 1, 1).features(x, omega=omega, **options)


NAIVE = {  # f(u) per docs/paper.md, one scalar at a time
    "elu": lambda u: u + 1 if u > 0 else math.exp(u),
    "softplus": lambda u: math.log1p(math.exp(u)),
    "porf-softplus": lambda u: math.log1p(math.exp(u)),
    "sigmoid2": lambda u: (1 / (1 + math.exp(-u))) ** 2,
    "cos2": lambda u: math.cos(u) ** 2,
}


@pytest.mark.parametrize("kind", sorted(NAIVE))
def test_scaled_elementwise_maps_match_their_definition(kind):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 3, 4, generator=g, dtype=torch.float64)
    omega = torch.randn(2, 5, 4, generator=g, dtype=torch.float64)
    phi = feature_values(kind, x, omega, is_query=True)
    for h in range(2):
        for n in range(3):
            for k in range(5):
                u = float(omega[h, k] @ x[0, h, n]) * 4**-0.25
                assert phi[0, h, n, k].item() == pytest.approx(NAIVE[kind](u) / math.sqrt(5), rel=1e-10)


def test_softmaxfeat_and_trig_match_their_definition():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 1, 3, 4, generator=g, dtype=torch.float64)
    omega = torch.randn(1, 6, 4, generator=g, dtype=torch.float64)
    u = (x[0, 0] * 4**-0.25) @ omega[0].T
    soft = feature_values("softmaxfeat", x, omega, is_query=False)[0, 0]
    trig = feature_values("trig", x, omega, is_query=False)[0, 0]
    expected_soft = torch.stack([torch.exp(r) / torch.exp(r).sum() for r in u]) / math.sqrt(6)
    torch.testing.assert_close(soft, expected_soft)
    torch.testing.assert_close(trig, torch.cat([u.sin(), u.cos()], dim=-1) / math.sqrt(6))


def test_favor_features_estimate_softmax_kernel_up_to_stabiliser():
    """favor: phi(q).phi(k) * exp(stabilisers) ~ exp(q.k / sqrt(d)); check the un-stabilised ratio over keys."""
    torch.manual_seed(0)
    d, m = 8, 20000
    q, k = 0.5 * torch.randn(1, 1, 1, d, dtype=torch.float64), 0.5 * torch.randn(1, 1, 6, d, dtype=torch.float64)
    omega = torch.randn(1, m, d, dtype=torch.float64)
    phi_q, phi_k = feature_values("favor", q, omega, is_query=True), feature_values("favor", k, omega, is_query=False)
    estimate = (phi_q @ phi_k.transpose(-1, -2))[0, 0, 0]
    exact = torch.exp(q[0, 0] @ k[0, 0].T / math.sqrt(d))[0]
    torch.testing.assert_close(estimate / estimate.sum(), exact / exact.sum(), rtol=0.03, atol=0)


def test_trig_features_estimate_gaussian_kernel():
    torch.manual_seed(0)
    d, m = 8, 20000
    x, y = 0.5 * torch.randn(1, 1, 1, d, dtype=torch.float64), 0.5 * torch.randn(1, 1, 4, d, dtype=torch.float64)
    omega = torch.randn(1, m, d, dtype=torch.float64)
    phi_x, phi_y = feature_values("trig", x, omega, is_query=True), feature_values("trig", y, omega, is_query=False)
    estimate = (phi_x @ phi_y.transpose(-1, -2))[0, 0, 0]
    exact = torch.exp(-((x - y) * d**-0.25).pow(2).sum(-1) / 2)[0, 0]
    torch.testing.assert_close(estimate, exact, atol=0.03, rtol=0)


def test_favor_key_stabiliser_ignores_padded_positions():
    torch.manual_seed(0)
    omega = torch.randn(2, 16, 8)
    x = torch.randn(1, 2, 5, 8)
    mask = torch.tensor([[True, True, True, False, False]])
    loud = x.clone()
    loud[:, :, 3:] = 50.0  # huge padded keys would dominate an unmasked max
    a = feature_values("favor", x, omega, is_query=False, key_padding_mask=mask)[:, :, :3]
    b = feature_values("favor", loud, omega, is_query=False, key_padding_mask=mask)[:, :, :3]
    torch.testing.assert_close(a, b)


def test_orthogonal_gaussian_blocks_are_orthogonal_with_requested_norms():
    g = torch.Generator().manual_seed(0)
    w = orthogonal_gaussian(20, 8, g, scaling="sqrt-d")
    assert w.shape == (20, 8)
    for block in (w[:8], w[8:16]):
        torch.testing.assert_close(block @ block.T, 8.0 * torch.eye(8), atol=1e-4, rtol=0)
    chi = orthogonal_gaussian(4096, 16, g, scaling="chi").norm(dim=1)
    assert abs(chi.pow(2).mean().item() - 16) < 1.0  # E|g|^2 = d for Gaussian rows
    assert chi.std() > 0.1


def test_seed_fixes_omegas_per_head_and_they_are_buffers():
    a = EluMap(8, 3, 16, seed=5)
    b = EluMap(8, 3, 16, seed=5)
    c = EluMap(8, 3, 16, seed=6)
    torch.testing.assert_close(a.omega, b.omega)
    assert not torch.allclose(a.omega, c.omega)
    assert not torch.allclose(a.omega[0], a.omega[1])
    assert a.omega.shape == (3, 16, 8) and list(a.parameters()) == [] and "omega" in a.state_dict()
    assert torch.equal(
        torch.randn(3, generator=seeded_generator(1, 2)), torch.randn(3, generator=seeded_generator(1, 2))
    )


@pytest.mark.parametrize("kind", list(FEATURE_MAPS))
def test_scaled_attention_matches_naive_normalised_kernel(kind):
    torch.manual_seed(0)
    attn = build_attention(
        "random-features", head_dim=8, num_heads=2, feature_map=kind, num_features=16, seed=1, form="scaled"
    )
    q, k, v = (torch.randn(2, 2, 6, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    out = attn.double()(q, k, v, key_padding_mask=mask)
    fq = feature_values(kind, q, attn.feature_map.omega, is_query=True)
    fk = feature_values(kind, k, attn.feature_map.omega, is_query=False, key_padding_mask=mask)
    assert attn.feature_map.omega.shape == (2, 16, 8) and attn.feature_map.phase is None
    for b in range(2):
        for h in range(2):
            n = int(mask[b].sum())
            weights = fq[b, h] @ fk[b, h, :n].T  # (6, n), naive n x n
            expected = (weights @ v[b, h, :n]) / weights.sum(-1, keepdim=True)
            torch.testing.assert_close(out[b, h], expected)
    assert attn.feature_map.positive == (kind != "trig")
    assert attn.feature_map.num_features == (32 if kind == "trig" else 16)


def test_config_errors_are_clear():
    with pytest.raises(ConfigError, match="did you mean 'softplus'"):
        build_attention("random-features", feature_map="softplu")
    with pytest.raises(ConfigError, match="num_features=0"):
        build_attention("random-features", num_features=0)


def paper_phi(
    kind: str,
    x: torch.Tensor,
    omega: torch.Tensor,
    phase: torch.Tensor | None,
    tau: float = 1.0,
    floor: float = 1e-6,
    bias: float = 0.0,
) -> torch.Tensor:
    """docs/paper.md's table, token by token in float64: x (N, d), omega (M, d) -> phi (N, M)."""
    m = omega.shape[0]
    rows = []
    for token in x.double():
        u = omega.double() @ token
        if kind == "favor":
            rows.append(torch.exp(u - token @ token / 2) / math.sqrt(m))
            continue
        if kind == "softmaxfeat":
            rows.append(math.sqrt(m) * torch.exp(u / tau) / torch.exp(u / tau).sum())
            continue
        if kind == "elu":
            f = torch.clamp(1 + torch.nn.functional.elu(u / tau + bias), min=floor)
        elif kind in ("softplus", "porf-softplus"):
            f = torch.log1p(torch.exp(u / tau)) + floor
        elif kind == "sigmoid2":
            f = torch.sigmoid(u / tau) ** 2
        else:
            f = torch.cos(u + phase.double()) ** 2
        rows.append(math.sqrt(m) * f / f.sum())
    return torch.stack(rows)


def naive_attention(phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """O(n^2) linear attention with explicit features: (N, M), (N, M), (N, D), real (N,) bool -> (N, D)."""
    weights = (phi_q @ phi_k.T) * real.double()[None, :]
    return weights @ v.double() / weights.sum(dim=1, keepdim=True)


PAPER_MAPS = [k for k in FEATURE_MAPS if k != "trig"]


def use_native(on: bool, monkeypatch) -> None:
    """The module's switch: off makes every call take the PyTorch path (as ATTNBENCH_NATIVE=0 does)."""
    if not on:
        monkeypatch.setattr(native.runtime, "library", lambda: None)


@pytest.mark.parametrize("kind", PAPER_MAPS)
@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("native_on", [True, False])
def test_paper_maps_through_the_attention_match_the_formula(kind, grad, native_on, monkeypatch):
    use_native(native_on, monkeypatch)
    options = {"temperature": 0.7, "elu_bias": 0.3} if kind in ("elu", "softplus") else {}
    attn = build_attention(
        "random-features", head_dim=16, num_heads=2, feature_map=kind, num_features=16, seed=3, **options
    )
    fmap = attn.feature_map
    assert fmap.omega.shape == (2, 16, 16)
    assert (fmap.phase is not None) == (kind == "cos2") and (kind != "cos2" or fmap.phase.shape == (2, 16))
    g = torch.Generator().manual_seed(0)
    q, k, v = (0.4 * torch.randn(2, 2, 20, 16, generator=g) for _ in range(3))
    q.requires_grad_(grad)
    mask = torch.tensor([[True] * 20, [True] * 13 + [False] * 7])
    with torch.set_grad_enabled(grad):
        out = attn(q, k, v, key_padding_mask=mask)
    tau, bias = options.get("temperature", 1.0), options.get("elu_bias", 0.0)
    for b in range(2):
        for h in range(2):
            phase = None if fmap.phase is None else fmap.phase[h]
            phi_q = paper_phi(kind, q[b, h].detach(), fmap.omega[h], phase, tau, bias=bias)
            phi_k = paper_phi(kind, k[b, h], fmap.omega[h], phase, tau, bias=bias)
            expected = naive_attention(phi_q, phi_k, v[b, h], mask[b])
            torch.testing.assert_close(out[b, h].detach().double(), expected, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("kind", PAPER_MAPS)
def test_paper_maps_causal_form_matches_the_formula(kind):
    attn = build_attention("random-features", head_dim=16, feature_map=kind, num_features=16, causal=True, seed=2)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 70, 16, generator=g) for _ in range(3))
    k[:, :, 60:] *= 4.0  # loud later keys must not reach earlier outputs
    out = attn(q, k, v)
    fmap = attn.feature_map
    for h in range(2):
        phase = None if fmap.phase is None else fmap.phase[0]
        phi_q, phi_k = paper_phi(kind, q[0, h], fmap.omega[0], phase), paper_phi(kind, k[0, h], fmap.omega[0], phase)
        weights = (phi_q @ phi_k.T).tril()
        expected = weights @ v[0, h].double() / weights.sum(1, keepdim=True)
        torch.testing.assert_close(out[0, h].detach().double(), expected, rtol=2e-4, atol=2e-5)


def test_paper_maps_sum_to_sqrt_m_and_omegas_follow_the_form():
    x = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    for kind in ("elu", "softplus", "sigmoid2", "cos2", "porf-softplus", "softmaxfeat"):
        fmap = build_attention(
            "random-features", head_dim=8, num_heads=2, feature_map=kind, num_features=24
        ).feature_map
        phi = fmap.double().forward_keys(x)
        torch.testing.assert_close(phi.sum(-1), torch.full((1, 2, 5), math.sqrt(24), dtype=torch.float64))
    iid = build_attention("random-features", head_dim=8, feature_map="softplus", num_features=8).feature_map.omega[0]
    porf = build_attention(
        "random-features", head_dim=8, feature_map="porf-softplus", num_features=8
    ).feature_map.omega[0]
    gram = porf @ porf.T
    torch.testing.assert_close(gram - torch.diag(torch.diag(gram)), torch.zeros(8, 8), atol=1e-4, rtol=0)
    assert (iid @ iid.T - torch.diag(torch.diag(iid @ iid.T))).abs().max() > 0.5
    with pytest.raises(ConfigError, match="temperature"):
        build_attention("random-features", temperature=0.0)
    assert build_attention("coulomb", feature_map="cos2").feature_form == "paper cos2, tau 1.0, floor 1e-06"
    assert build_attention("random-features", form="scaled").feature_form == "scaled favor"


FEATURE_MAP_ATTENTIONS = {
    "performer": {"num_features": 32},
    "rfa": {"num_features": 16},
    "random-features": {"feature_map": "favor", "num_features": 32},
    "random-features-elu": {"feature_map": "elu", "num_features": 32, "form": "scaled"},
    "coulomb": {"feature_map": "favor", "num_features": 32},
    "coulomb-softplus": {"feature_map": "softplus", "num_features": 32},
    "elu-linear": {},
}


def _build(label: str, **options):
    return build_attention(
        label.split("-elu")[0].split("-softplus")[0], head_dim=16, seed=0, **FEATURE_MAP_ATTENTIONS[label], **options
    ).eval()


@pytest.mark.parametrize("label", sorted(FEATURE_MAP_ATTENTIONS))
@pytest.mark.parametrize("batch, heads", [(1, 1), (2, 4), (3, 2)])
def test_one_head_parameters_serve_any_head_count_on_both_paths(label, batch, heads, monkeypatch):
    g = torch.Generator().manual_seed(heads)
    q, k, v = (torch.randn(batch, heads, 24, 16, generator=g) for _ in range(3))
    outputs, calls = [], []
    for native_on in (True, False):
        with monkeypatch.context() as patch:
            use_native(native_on, patch)
            real = native.attention
            patch.setattr(native, "attention", lambda *a: calls.append(native_on) or real(*a))  # noqa: B023
            attn = _build(label)
            with torch.no_grad():
                outputs.append(attn(q, k, v))
            outputs.append(attn(q, k, v.requires_grad_(True)).detach())
            v.requires_grad_(False)
    for out in outputs[1:]:
        torch.testing.assert_close(out, outputs[0], rtol=1e-4, atol=1e-5)
    assert (True in calls) == (native.library() is not None) and False not in calls  # every paper map is fused
    per_head = _build(label, num_heads=heads)  # num_heads copies of head 0's draw give the same outputs
    shared = _build(label)
    for name, tensor in shared.state_dict().items():
        per_head.state_dict()[name].copy_(tensor.expand_as(per_head.state_dict()[name]) if tensor.ndim else tensor)
    with torch.no_grad():
        torch.testing.assert_close(per_head(q, k, v), outputs[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("label", sorted(set(FEATURE_MAP_ATTENTIONS) - {"elu-linear"}))
@pytest.mark.parametrize("native_on", [True, False])
def test_a_head_count_the_parameters_cannot_serve_names_num_heads(label, native_on, monkeypatch):
    use_native(native_on, monkeypatch)
    attn = _build(label, num_heads=2)
    x = torch.randn(1, 3, 8, 16)
    for grad in (False, True):
        with torch.set_grad_enabled(grad), pytest.raises(ConfigError, match="num_heads=2 but called on 3 heads"):
            attn(x, x, x)
