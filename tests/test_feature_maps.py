"""One class per random-feature map: the registry is the option's choices, the fused form is what the class
declares, and a new map is one class that the shared kernel runs."""

import typing

import pytest
import torch

from attnbench.baselines.feature_maps import FEATURE_MAPS, SoftplusMap, feature_map_class
from attnbench.baselines.random_feature_map import SCALED, MapForm, RandomFeatureMap
from attnbench.baselines.random_features import RandomFeaturesConfig
from attnbench.kernels import native
from attnbench.kernels.linear.attention import LinearKernelAttention


def test_the_registry_is_the_feature_map_options_choices_in_order():
    hints = typing.get_type_hints(RandomFeaturesConfig)
    assert list(typing.get_args(hints["feature_map"])) == list(FEATURE_MAPS)
    assert all(cls.kind == kind for kind, cls in FEATURE_MAPS.items())
    with pytest.raises(ValueError, match="unknown feature map 'relu'; choose one of: favor, elu"):
        feature_map_class("relu")


@pytest.mark.parametrize("kind", list(FEATURE_MAPS))
@pytest.mark.parametrize("form", [MapForm(), SCALED])
def test_the_fused_form_is_the_one_the_class_declares(kind, form):
    fmap = FEATURE_MAPS[kind](16, 2, 16, form=form)
    declared = fmap.native and (fmap.native.paper if fmap.form.paper else fmap.native.scaled)
    spec = fmap.native_spec(torch.randn(1, 2, 3, 16))
    assert (spec is None) == (declared is None)
    if spec is not None:
        assert spec.kind == declared and spec.kind in native.KINDS
        assert spec.weights.shape == (2, 16, 16)
        assert (spec.phase is not None) == (kind == "cos2" and form.paper)


class ReluMap(RandomFeatureMap):
    """A map written as a newcomer would: its name, its operation count and f; no fused form."""

    kind = "relu-test"
    elementwise_ops = 1

    def features_of(self, u):
        return torch.relu(u) + 1e-3


@pytest.mark.parametrize("form", [MapForm(temperature=2.0), SCALED])
@pytest.mark.parametrize("grad", [False, True])
def test_a_new_map_is_one_class_that_the_kernel_runs_in_both_forms(form, grad):
    fmap = ReluMap(8, 2, 12, seed=4, form=form)
    attn = LinearKernelAttention(fmap).double()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 7, 8, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.tensor([[True] * 7, [True] * 5 + [False] * 2])
    with torch.set_grad_enabled(grad):
        out = attn(q, k, v, key_padding_mask=mask)
    alpha = 1.0 if form.paper else 8**-0.25  # not tempered: tau does not act
    phi_q = torch.relu((alpha * q) @ fmap.omega.double().transpose(-2, -1)) + 1e-3
    phi_k = torch.relu((alpha * k) @ fmap.omega.double().transpose(-2, -1)) + 1e-3
    if form.paper:  # renormalised to sum sqrt(M)
        phi_q, phi_k = (12**0.5 * phi / phi.sum(-1, keepdim=True) for phi in (phi_q, phi_k))
    weights = (phi_q @ phi_k.transpose(-2, -1)) * mask[:, None, None, :]
    expected = weights @ v / weights.sum(-1, keepdim=True)
    torch.testing.assert_close(out.detach(), expected)
    assert set(attn.kernel_routes) <= {"pytorch-chunked", "pytorch-factored"}
    assert fmap.cost(10, 8)["flops"] == 2 * (2.0 * 10 * 12 * 8 + 10 * 12)


def test_a_map_without_its_fused_form_computes_the_same_features():
    class PlainSoftplus(SoftplusMap):
        native = None

    fused, plain = SoftplusMap(16, 2, 16, seed=1, form=MapForm()), PlainSoftplus(16, 2, 16, seed=1, form=MapForm())
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 40, 16, generator=g) for _ in range(3))
    with torch.no_grad():
        expected = LinearKernelAttention(fused)(q, k, v)
        attn = LinearKernelAttention(plain)
        torch.testing.assert_close(attn(q, k, v), expected, rtol=1e-4, atol=1e-5)
    assert attn.kernel_routes == {"pytorch-chunked": 1}


def test_learned_omegas_are_parameters_and_never_redrawn():
    fmap = SoftplusMap(8, 2, 4, seed=3, learned=True)
    drawn = SoftplusMap(8, 2, 4, seed=3)
    assert [name for name, _ in fmap.named_parameters()] == ["omega"]
    torch.testing.assert_close(fmap.omega.detach(), drawn.omega)
    fmap.new_feature_map()
    drawn.new_feature_map()
    torch.testing.assert_close(fmap.omega.detach(), SoftplusMap(8, 2, 4, seed=3).omega)
    assert not torch.equal(drawn.omega, fmap.omega.detach())
