"""The random-feature maps, one class each: the values of the `feature_map` option of `random-features`, `coulomb`
and `ce-kernel` (`FEATURE_MAPS`). Each names itself (`kind`), states its traits, computes f of the projections
u = omega^T (alpha x) in both forms (`features_of`, or `chunk` where it needs more) and may declare its fused
form (`native`); `RandomFeatureMap` does the rest (omegas, forms, caching, costs).

The forms (`attnbench.baselines.random_feature_map`), per map, with tau the temperature, floor, Z(x) the per-token
l1 normaliser making sum_i phi_i(x) = sqrt(M), and x' = d^{-1/4} x in the scaled form:

    map            paper                                             scaled
    favor          (1/sqrt(M)) exp(u - |x|^2/2), no renormalisation   exp(u - |x'|^2/2 - max) + eps (Performer's)
    elu            max(1 + elu(u / tau + b), floor) / Z(x)            elu(u) + 1
    softplus       (softplus(u / tau) + floor) / Z(x)                 log(1 + e^u)
    sigmoid2       sigmoid(u / tau)^2 / Z(x)                          sigmoid(u)^2
    cos2           cos(u_i + b_i)^2 / Z(x), b_i ~ U[0, 2 pi) fixed    cos(u)^2
    softmaxfeat    sqrt(M) softmax(u / tau), sums to sqrt(M)          softmax of (u_1..u_M) over the M features
    porf-softplus  the softplus map, omegas in orthogonal blocks      softplus(u), positive orthogonal random features
    trig           [sin(u), cos(u)] (RFA's; not in the paper; NOT positive, so the normaliser can change sign):
                   the scaled form in both

(scaled: features f(u) / sqrt(M)). favor's stabilising max (both forms) is taken of the whole exponent
u - |x|^2/2: a constant factor per query row and per (batch, head) of keys, which cancels in the attention.

Adding a map: one class here, registered with `@register_feature_map`. With a fused C++ form, also its row in
`attnbench.kernels.native.KIND_TABLE` (and `PAPER_KINDS` where the kernel renormalises its keys) and its f and
df/du in `harness/kernels/native/fused_linear.cpp`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnbench.baselines.random_feature_map import NativeForm, RandomFeatureMap
from attnbench.baselines.random_projections import per_head, project
from attnbench.kernels.cpu_threads import scratch
from attnbench.kernels.linear.contract import FeatureChunk, no_grad_recorded

FAVOR_EPS = 1e-6
CAUSAL_FAVOR_CAP = 80.0  # causal favor: largest key exponent above the first key's (exp(88) overflows float32)
FEATURE_MAPS: dict[str, type[RandomFeatureMap]] = {}  # kind -> class, in the order of this file


def register_feature_map(cls: type[RandomFeatureMap]) -> type[RandomFeatureMap]:
    """Make a map class a value of the `feature_map` option, under its `kind`."""
    FEATURE_MAPS[cls.kind] = cls
    return cls


def feature_map_class(kind: str) -> type[RandomFeatureMap]:
    """The class of the map named `kind`; a ValueError naming the choices for an unknown one."""
    if kind not in FEATURE_MAPS:
        raise ValueError(f"unknown feature map {kind!r}; choose one of: {', '.join(FEATURE_MAPS)}")
    return FEATURE_MAPS[kind]


def _favor_values(x: Tensor, weights: Tensor, out: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """favor's exp(u - m_i), u = x @ weights, m_i the row's largest u (detached), so every value is in (0, 1]:
    (values (B, H, C, M), m (B, H, C, 1))."""
    u = project(x, weights, out)
    row_max = u.detach().amax(dim=-1, keepdim=True)  # (B, H, C, 1)
    return (u.sub_(row_max).exp_() if no_grad_recorded(u) else (u - row_max).exp()), row_max


def _key_row_log(x: Tensor, row_max: Tensor, norm_coef: float, key_padding_mask: Tensor | None) -> Tensor:
    """Each key row's log-weight m_i - |x'_i|^2 / 2 = m_i - norm_coef |x_i|^2 (B, H, C, 1), -inf at padding."""
    row_log = row_max - (x * x).sum(dim=-1, keepdim=True) * norm_coef
    if key_padding_mask is not None:
        row_log = row_log.masked_fill(~key_padding_mask[:, None, :, None], -math.inf)
    return row_log


def _favor_chunk(
    x: Tensor,
    weights: Tensor,
    scale: float,
    eps: float,
    norm_coef: float,
    is_query: bool,
    key_padding_mask: Tensor | None,
    out: Tensor | None = None,
) -> FeatureChunk:
    """favor features of a block, phi = scale (exp(u - |x'|^2/2 - max) + eps), u = omega x', x' = alpha x
    (alpha folded into `weights`; `norm_coef` = alpha^2 / 2), factored as values exp(u - m_i)
    (m_i the row's largest u, so every value is in (0, 1]) times row weights.

    A query's max is over its own row, where |x'|^2/2 is a constant: its values are the features, no row
    weight. A key's row weight is exp(m_i - |x'_i|^2/2 - L), L the block's largest exponent (its log-scale,
    over real positions; padding gets weight 0), so that values * weight = exp(u - |x'|^2/2 - L).
    """
    values, row_max = _favor_values(x, weights, out)
    if is_query:
        return FeatureChunk(values, scale, eps)
    row_log = _key_row_log(x, row_max, norm_coef, key_padding_mask)
    log_scale = row_log.detach().amax(dim=-2, keepdim=True)  # (B, H, 1, 1): -inf for a block without real keys
    row_weights = torch.exp(row_log - log_scale.masked_fill(log_scale == -math.inf, 0.0))
    return FeatureChunk(values, scale, eps, log_scale, row_weights)


def causal_favor_keys(
    x: Tensor,
    weights: Tensor,
    scale: float,
    eps: float,
    norm_coef: float,
    key_padding_mask: Tensor | None,
    anchor: Tensor | None = None,
) -> tuple[FeatureChunk, Tensor]:
    """favor key features of the causal form: as `_favor_chunk`'s, but L is the first real key's exponent (the
    anchor), which no later key moves, instead of the sequence's largest; the exponent above it is capped at
    CAUSAL_FAVOR_CAP against overflow. `anchor` (B, H, 1, 1) from earlier blocks (-inf: no real key yet), else
    this block's first real key's -> (chunk, anchor after this block)."""
    values, row_max = _favor_values(x, weights)
    row_log = _key_row_log(x, row_max, norm_coef, key_padding_mask)
    first = (
        key_padding_mask.to(torch.uint8).argmax(dim=1)
        if key_padding_mask is not None
        else x.new_zeros(x.shape[0], dtype=torch.long)
    )  # (B,): the first real position (0 without a mask)
    found = row_log.detach().gather(2, first[:, None, None, None].expand(-1, x.shape[1], 1, 1))
    anchor = found if anchor is None else torch.where(anchor == -math.inf, found.to(anchor), anchor)
    used = anchor.masked_fill(anchor == -math.inf, 0.0)  # no real key yet: every weight is 0 anyway
    return FeatureChunk(values, scale, eps, None, torch.exp((row_log - used).clamp_max(CAUSAL_FAVOR_CAP))), anchor


@register_feature_map
class FavorMap(RandomFeatureMap):
    """favor, Performer's positive features: (1/sqrt(M)) exp(u - |x|^2/2) (paper), M^{-1/2} (exp(u - |x'|^2/2 - max)
    + eps) (scaled), both stabilised by a max that cancels in the attention (`_favor_chunk`)."""

    kind = "favor"
    elementwise_ops = 3  # max, subtract, exp
    paper_eps = 1e-30  # the features carry an arbitrary stabilising scale that a guard of 1e-6 would swamp
    causal_anchor = True  # keys carry a stabiliser, which the causal form fixes by the first real key
    native = NativeForm(paper="favor", scaled="favor")

    @property
    def offset(self) -> float:
        return 0.0 if self.form.paper else FAVOR_EPS

    def norm_coef(self, dim: int) -> float:
        """alpha^2 / 2, the coefficient of |x|^2 in the exponent: 1/2 (paper), d^{-1/2} / 2 (scaled)."""
        return 0.5 if self.form.paper else dim**-0.5 / 2

    def chunk(
        self,
        x: Tensor,
        weights: Tensor,
        *,
        is_query: bool,
        key_padding_mask: Tensor | None = None,
        out: Tensor | None = None,
    ) -> FeatureChunk:
        scale, norm_coef = weights.shape[-1] ** -0.5, self.norm_coef(x.shape[-1])
        return _favor_chunk(x, weights, scale, self.offset, norm_coef, is_query, key_padding_mask, out)

    def causal_key_chunk(
        self, x: Tensor, key_padding_mask: Tensor | None = None, anchor: Tensor | None = None
    ) -> tuple[FeatureChunk, Tensor | None]:
        """Key features of the causal form, stabilised by the first real key's exponent rather than the sequence's
        largest, which later keys would move (`causal_favor_keys`)."""
        scale, norm_coef = self.omega.shape[-2] ** -0.5, self.norm_coef(x.shape[-1])
        return causal_favor_keys(x, self._weights(x), scale, self.offset, norm_coef, key_padding_mask, anchor)

    @classmethod
    def flops(cls, n: int, d: int, m: int) -> float:
        """As every map's, plus |x|^2 of the keys (2 n d; a query's cancels against its own max)."""
        return super().flops(n, d, m) + 2.0 * n * d

    def paper_settings(self) -> str:
        return ""  # no temperature, floor or renormalisation


class _EluPlusOne(torch.autograd.Function):
    """elu(u) + 1 whose backward needs only the output: d phi / du = min(phi, 1) (exp(u) = phi below 0, 1 above;
    1 at 0, as elu). Autograd through clamp and relu would keep u and mask it twice, several times slower."""

    @staticmethod
    def forward(ctx: object, u: Tensor) -> Tensor:
        phi = u.clamp_max(0.0).exp_().add_(u.clamp_min(0.0))
        ctx.save_for_backward(phi)
        return phi

    @staticmethod
    def backward(ctx: object, grad: Tensor) -> Tensor:
        (phi,) = ctx.saved_tensors
        return phi.clamp_max(1.0).mul_(grad)


def elu_plus_one(u: Tensor, out: Tensor | None = None) -> Tensor:
    """elu(u) + 1 = exp(min(u, 0)) + max(u, 0): about twice as fast as torch's elu on CPU; into `out` (or in
    place of u when out is u) where no gradient is recorded; differentiable, with elu's derivative."""
    if not no_grad_recorded(u):
        return _EluPlusOne.apply(u)
    if out is None:
        return u.clamp_max(0.0).exp_().add_(u.clamp_min(0.0))
    high = torch.clamp_min(u, 0.0, out=scratch(u.shape, u.dtype, u.device, slot=1))
    return torch.clamp_max(u, 0.0, out=out).exp_().add_(high)


@register_feature_map
class EluMap(RandomFeatureMap):
    """elu: max(1 + elu(u / tau + b), floor) / Z(x) (paper), elu(u) + 1 (scaled)."""

    kind = "elu"
    elementwise_ops = 4  # clamp, exp, relu, add
    tempered = True
    native = NativeForm(paper="elu-paper", scaled="elu")

    @property
    def bias(self) -> float:
        return self.form.elu_bias

    def features_of(self, u: Tensor) -> Tensor:
        if not self.form.paper:
            return elu_plus_one(u, u)
        if self.bias:
            u = u.add_(self.bias) if no_grad_recorded(u) else u + self.bias
        return elu_plus_one(u, u).clamp_min(self.form.floor)

    def paper_settings(self) -> str:
        return f"{super().paper_settings()}, elu bias {self.form.elu_bias}"


@register_feature_map
class SoftplusMap(RandomFeatureMap):
    """softplus: (softplus(u / tau) + floor) / Z(x) (paper), log(1 + e^u) (scaled)."""

    kind = "softplus"
    elementwise_ops = 1
    tempered = True
    native = NativeForm(paper="softplus")

    def features_of(self, u: Tensor) -> Tensor:
        features = nn.functional.softplus(u)
        return features + self.form.floor if self.form.paper else features


@register_feature_map
class Sigmoid2Map(RandomFeatureMap):
    """sigmoid2: sigmoid(u / tau)^2 / Z(x) (paper), sigmoid(u)^2 (scaled)."""

    kind = "sigmoid2"
    elementwise_ops = 2
    tempered = True
    native = NativeForm(paper="sigmoid2")

    def features_of(self, u: Tensor) -> Tensor:
        return torch.sigmoid(u).square()


@register_feature_map
class Cos2Map(RandomFeatureMap):
    """cos2: cos(u_i + b_i)^2 / Z(x), b_i ~ U[0, 2 pi) fixed per head and feature (paper), cos(u)^2 (scaled)."""

    kind = "cos2"
    elementwise_ops = 2
    random_phases = True
    native = NativeForm(paper="cos2")

    def features_of(self, u: Tensor) -> Tensor:
        if not self.form.paper:
            return torch.cos(u).square()
        shifted = per_head(self.phase, u.shape[1])[:, None, :].to(u.dtype)
        if no_grad_recorded(u):
            return u.add_(shifted).cos_().square_()
        return torch.cos(u + shifted).square()


@register_feature_map
class SoftmaxFeatMap(RandomFeatureMap):
    """softmaxfeat: sqrt(M) softmax(u / tau) over the M features, which sums to sqrt(M) by construction (paper),
    softmax(u) / sqrt(M) (scaled)."""

    kind = "softmaxfeat"
    elementwise_ops = 5  # max, subtract, exp, sum, divide
    tempered = True
    native = NativeForm(paper="softmaxfeat")

    def chunk(
        self,
        x: Tensor,
        weights: Tensor,
        *,
        is_query: bool,
        key_padding_mask: Tensor | None = None,
        out: Tensor | None = None,
    ) -> FeatureChunk:
        m = weights.shape[-1]
        features = torch.softmax(project(x, weights, out), dim=-1)
        return FeatureChunk(features, math.sqrt(m) if self.form.paper else m**-0.5)


@register_feature_map
class PorfSoftplusMap(SoftplusMap):
    """porf-softplus: the softplus map with positive orthogonal random features (orthogonal omegas, chi norms)."""

    kind = "porf-softplus"
    always_orthogonal = True


def sin_cos(u: Tensor, out: Tensor | None = None) -> Tensor:
    """[sin(u), cos(u)] along the last axis: (..., M) -> (..., 2M); written into one buffer (`out` when given)
    where no gradient is recorded, concatenated otherwise."""
    if not no_grad_recorded(u):
        return torch.cat([torch.sin(u), torch.cos(u)], dim=-1)
    out = u.new_empty(*u.shape[:-1], 2 * u.shape[-1]) if out is None else out
    m = u.shape[-1]
    if torch.get_num_threads() > 1:  # an output strided like out[..., :m] splits badly across threads (5x slower here)
        sin, cos = (scratch(u.shape, u.dtype, u.device, slot) for slot in (2, 3))
        return torch.cat([torch.sin(u, out=sin), torch.cos(u, out=cos)], dim=-1, out=out)
    torch.sin(u, out=out[..., :m])
    torch.cos(u, out=out[..., m:])
    return out


def trig_features(x: Tensor, weights: Tensor, out: Tensor | None = None) -> Tensor:
    """[sin(x w), cos(x w)]: x (B, H, N, d), weights (B*H, d, M) -> (B, H, N, 2M), into `out` when given, with
    the projection in the thread's second scratch slot."""
    projected = None if out is None else scratch((*out.shape[:-1], weights.shape[-1]), x.dtype, x.device, slot=1)
    return sin_cos(project(x, weights, projected), out)


@register_feature_map
class TrigMap(RandomFeatureMap):
    """trig: [sin(u), cos(u)] / sqrt(M), 2M features (RFA's; not in the paper; not positive), the scaled form in
    both."""

    kind = "trig"
    elementwise_ops = 2  # sin, cos
    paper_form = False
    features_per_omega = 2
    positive = False
    native = NativeForm(scaled="trig")

    def chunk(
        self,
        x: Tensor,
        weights: Tensor,
        *,
        is_query: bool,
        key_padding_mask: Tensor | None = None,
        out: Tensor | None = None,
    ) -> FeatureChunk:
        return FeatureChunk(trig_features(x, weights, out), weights.shape[-1] ** -0.5)
