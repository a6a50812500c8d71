"""Random-feature maps phi_omega(x) built from u = omega^T x with fixed random omegas (the paper's "Vanilla" kernels).

Two forms (`MapForm`). The paper's (docs/paper.md "The feature maps", the default of `random-features` and
`coulomb`), with temperature tau, floor and Z(x) the per-token l1 normaliser making sum_i phi_i(x) = sqrt(M)
(queries and keys alike; a key's normaliser reweights that key):

    favor          (1/sqrt(M)) exp(u_i - |x|^2/2)                       no renormalisation
    elu            max(1 + elu(u_i / tau + b), floor) / Z(x)             b: `elu_bias`, one scalar (0)
    softplus       (softplus(u_i / tau) + floor) / Z(x)
    sigmoid2       sigmoid(u_i / tau)^2 / Z(x)
    softmaxfeat    sqrt(M) softmax(u / tau) over the M features          sums to sqrt(M) by construction
    cos2           cos(u_i + b_i)^2 / Z(x)                               b_i ~ U[0, 2 pi) fixed per head and feature
    porf-softplus  the softplus map, omegas in orthogonal blocks

**Our readings**: the floor clamps elu before Z (so the sum stays sqrt(M)); Z itself is guarded below by the
floor; tau acts only where the paper writes it (not in favor, cos2); the omegas of every map but porf-softplus
are i.i.d. Gaussian (porf-softplus differs from softplus only by its orthogonal omegas).

The scaled form (`form: scaled`, today's, and Performer's convention): x scaled by d^{-1/4} for every map,
features f(u) / sqrt(M) without renormalisation, no temperature, floor or phases, orthogonal omegas:

    favor          exp(u - |x|^2/2 - max) + eps   (Performer's positive features, stabilised)
    elu            elu(u) + 1
    softplus       log(1 + e^u)
    sigmoid2       sigmoid(u)^2
    cos2           cos(u)^2
    softmaxfeat    softmax of (u_1..u_M) over the M features
    porf-softplus  softplus(u), omegas always positive orthogonal random features (orthogonal, chi norms)

    trig           [sin(u), cos(u)] (RFA's; not in the paper; NOT positive, so the normaliser can change
                   sign): the scaled form in both

favor's stabilising max (both forms) is taken of the whole exponent u - |x|^2/2: a constant factor per query
row and per (batch, head) of keys, which cancels in the attention. In the scaled form every map's scale
M^{-1/2} makes phi(x)^T phi(x') = (1/M) sum_k f(omega_k^T x) f(omega_k^T x') the kernel estimate itself.

Parameters made for one head (`num_heads` 1) serve every head of a call (`per_head`).

The initial omegas (a control for the Coulomb model's phase A, `attnbench.baselines.coulomb`): drawn as above,
times `omega_scale` (so N(0, s^2 I) rows), then, with `projection_radius`, every row longer than the radius scaled
back onto the sphere of that radius (`project_to_ball`), exactly as phase A's first projected Langevin step does
with no force and no noise: `random-features` with the radius of a suite's phase A is the "projected Vanilla"
twin, whose difference from Kernel-<map> is what learning adds, not the shorter omegas.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import numpy as np
import torch
from torch import Tensor, nn

from attnbench.baselines.linear_kernel.attention import LinearKernelAttention
from attnbench.baselines.linear_kernel.contract import FeatureChunk, FeatureMap, no_grad_recorded
from attnbench.baselines.linear_kernel.cpu_threads import scratch
from attnbench.baselines.native import NativeSpec
from attnbench.baselines.short_conv import ShortConvConfig, short_conv_for, unfiltered
from attnbench.errors import ConfigError
from attnbench.options import option, require
from attnbench.registry import register_attention

FeatureMapKind = Literal["favor", "elu", "softplus", "sigmoid2", "cos2", "softmaxfeat", "porf-softplus", "trig"]
FEATURE_MAPS: tuple[str, ...] = FeatureMapKind.__args__
RowNorms = Literal["chi", "sqrt-d"]
FormName = Literal["paper", "scaled"]
FAVOR_EPS = 1e-6
CAUSAL_FAVOR_CAP = 80.0  # causal favor: largest key exponent above the first key's (exp(88) overflows float32)
TEMPERED = ("elu", "softplus", "porf-softplus", "sigmoid2", "softmaxfeat")  # maps whose u the paper divides by tau
# elementwise operations per projection u = omega^T x (cost accounting, one FLOP each): favor max, subtract, exp;
# elu clamp, exp, relu, add; softmaxfeat max, subtract, exp, sum, divide; trig sin, cos
ELEMENTWISE_OPS = {
    "favor": 3,
    "elu": 4,
    "softplus": 1,
    "porf-softplus": 1,
    "sigmoid2": 2,
    "cos2": 2,
    "softmaxfeat": 5,
    "trig": 2,
}


@dataclasses.dataclass(frozen=True)
class MapForm:
    """Which form a map computes (module docstring): the paper's, with its tau, floor and elu bias, or the scaled one."""

    paper: bool = True
    temperature: float = 1.0
    floor: float = 1e-6
    elu_bias: float = 0.0

    def input_scale(self, kind: str, dim: int) -> float:
        """alpha in u = omega^T (alpha x): 1 / tau for the tempered paper maps, 1 for the others, d^{-1/4} scaled."""
        if not self.paper or kind == "trig":
            return dim**-0.25
        return 1.0 / self.temperature if kind in TEMPERED else 1.0


SCALED = MapForm(paper=False)


def project_to_ball(omega: Tensor, radius: float) -> Tensor:
    """Rows (last axis) longer than `radius` scaled back onto the sphere of that radius."""
    norms = omega.norm(dim=-1, keepdim=True)
    return omega * (radius / norms).clamp(max=1.0)


def per_head(t: Tensor, heads: int) -> Tensor:
    """Per-head parameters (H, ...) for a call on `heads` heads: as they are, or one head's expanded to all."""
    if t.shape[0] == heads:
        return t
    if t.shape[0] == 1:
        return t.expand(heads, *t.shape[1:])
    raise ConfigError(
        f"the attention was built with num_heads={t.shape[0]} but called on {heads} heads; build it "
        f"with num_heads={heads}, or with num_heads=1 to share one head's parameters across every head"
    )


def seeded_generator(*keys: int) -> torch.Generator:
    """A CPU generator seeded from several integers (e.g. seed, head, draw), well mixed."""
    state = np.random.SeedSequence([int(k) for k in keys]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def orthogonal_gaussian(
    num_rows: int, dim: int, generator: torch.Generator | None = None, scaling: RowNorms = "chi"
) -> Tensor:
    """Stacked blocks of `dim` orthonormal rows (Haar QR), rescaled -> (num_rows, dim).

    scaling "chi": row norms drawn like Gaussian rows' (chi with dim degrees of freedom), so each row is
    marginally N(0, I); "sqrt-d": every row has norm sqrt(dim) (Performer's deterministic option).
    """
    blocks = []
    for _ in range(math.ceil(num_rows / dim)):
        q, r = torch.linalg.qr(torch.randn(dim, dim, generator=generator))
        blocks.append((q * torch.sign(torch.diagonal(r))).T)  # sign fix makes the block Haar-distributed
    rows = torch.cat(blocks)[:num_rows]
    if scaling == "chi":
        norms = torch.randn(num_rows, dim, generator=generator).norm(dim=1)
    elif scaling == "sqrt-d":
        norms = torch.full((num_rows,), math.sqrt(dim))
    else:
        raise ValueError(f"scaling={scaling!r} is not one of 'chi', 'sqrt-d'")
    return rows * norms[:, None]


def draw_omegas(
    num_heads: int,
    num_features: int,
    dim: int,
    seed: int,
    *,
    orthogonal: bool = True,
    scaling: RowNorms = "chi",
    draw: int = 0,
) -> Tensor:
    """Random frequencies per head -> (H, M, d); head h uses a generator seeded from (seed, h, draw)."""
    out = []
    for head in range(num_heads):
        generator = seeded_generator(seed, head, draw)
        if orthogonal:
            out.append(orthogonal_gaussian(num_features, dim, generator, scaling))
        else:
            out.append(torch.randn(num_features, dim, generator=generator))
    return torch.stack(out)


def draw_phases(num_heads: int, num_features: int, seed: int, draw: int = 0) -> Tensor:
    """cos2's random phases b ~ U[0, 2 pi) per head -> (H, M); head h from a generator seeded (seed, h, draw, 1)."""
    return torch.stack(
        [
            torch.rand(num_features, generator=seeded_generator(seed, head, draw, 1)) * (2 * math.pi)
            for head in range(num_heads)
        ]
    )


def projection_weights(
    omega: Tensor, batch: int, alpha: float = 1.0, dtype: torch.dtype | None = None, heads: int | None = None
) -> Tensor:
    """alpha omega^T laid out for one batched product: omega (H, M, d) -> (batch * heads, d, M) (a view for batch 1
    and H heads); `heads` (default H) expands one head's omegas to every head (`per_head`)."""
    w = (per_head(omega, heads or omega.shape[0]).to(dtype or omega.dtype) * alpha).transpose(-2, -1)
    return w if batch == 1 else w.expand(batch, *w.shape).reshape(-1, *w.shape[1:])


def project(x: Tensor, weights: Tensor, out: Tensor | None = None) -> Tensor:
    """x @ weights as one batched product: x (B, H, N, d), weights (B*H, d, M) from `projection_weights`
    -> (B, H, N, M), written into `out` (B, H, N, M) when given."""
    b, h, n, d = x.shape
    x3 = x.reshape(b * h, n, d)
    if out is None:
        return torch.bmm(x3, weights).view(b, h, n, -1)
    torch.bmm(x3, weights, out=out.view(b * h, n, -1))
    return out


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


def _favor_values(x: Tensor, weights: Tensor, out: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """favor's exp(u - m_i), u = x @ weights, m_i the row's largest u (detached), so every value is in (0, 1]:
    (values (B, H, C, M), m (B, H, C, 1))."""
    u = project(x, weights, out)
    row_max = u.detach().amax(dim=-1, keepdim=True)  # (B, H, C, 1)
    return (u.sub_(row_max).exp_() if no_grad_recorded(u) else (u - row_max).exp()), row_max


def _key_row_log(x: Tensor, row_max: Tensor, norm_coef: float | None, key_padding_mask: Tensor | None) -> Tensor:
    """Each key row's log-weight m_i - |x'_i|^2 / 2 (B, H, C, 1), -inf at padding."""
    norm_coef = x.shape[-1] ** -0.5 / 2 if norm_coef is None else norm_coef
    row_log = row_max - (x * x).sum(dim=-1, keepdim=True) * norm_coef
    if key_padding_mask is not None:
        row_log = row_log.masked_fill(~key_padding_mask[:, None, :, None], -math.inf)
    return row_log


def _favor_chunk(
    x: Tensor,
    weights: Tensor,
    scale: float,
    is_query: bool,
    key_padding_mask: Tensor | None,
    out: Tensor | None = None,
    norm_coef: float | None = None,
    eps: float = FAVOR_EPS,
) -> FeatureChunk:
    """favor features of a block, phi = scale (exp(u - |x'|^2/2 - max) + eps), u = omega x', x' = alpha x
    (alpha folded into `weights`; `norm_coef` = alpha^2 / 2, default d^{-1/4}'s), factored as values exp(u - m_i)
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
    key_padding_mask: Tensor | None,
    anchor: Tensor | None = None,
    norm_coef: float | None = None,
    eps: float = FAVOR_EPS,
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


def _unscaled_features(kind: str, u: Tensor) -> Tensor:
    """f(u) of an elementwise (or softmax / trig) map, before the 1/sqrt(M) scale; in place of u where the map
    allows and no gradient is recorded."""
    if kind == "elu":
        return elu_plus_one(u, u)
    if kind in ("softplus", "porf-softplus"):
        return nn.functional.softplus(u)
    if kind == "sigmoid2":
        return torch.sigmoid(u).square()
    if kind == "cos2":
        return torch.cos(u).square()
    if kind == "softmaxfeat":
        return torch.softmax(u, dim=-1)
    if kind == "trig":
        return sin_cos(u)
    raise ValueError(f"unknown feature map {kind!r}; choose one of: {', '.join(FEATURE_MAPS)}")


def random_feature_flops(kind: str, n: int, d: int, m: int) -> float:
    """FLOPs of the features of n queries and n keys (one batch and head) with m omegas: the projection
    (2 n m d), the map's elementwise operations (ELEMENTWISE_OPS per projected value) and favor's |x|^2 of the
    keys (2 n d; a query's cancels against its own max)."""
    return 2 * (2.0 * n * m * d + ELEMENTWISE_OPS[kind] * n * m) + (2.0 * n * d if kind == "favor" else 0.0)


def _paper_values(kind: str, u: Tensor, form: MapForm, phase: Tensor | None) -> Tensor:
    """f of a renormalised paper map (module docstring), before Z: u (B, H, N, M) projected with `input_scale`;
    in place of u where no gradient is recorded."""
    inplace = no_grad_recorded(u)
    if kind == "cos2":
        shifted = phase[:, None, :].to(u.dtype)
        u = u.add_(shifted) if inplace else u + shifted
        return u.cos_().square_() if inplace else torch.cos(u).square()
    if kind == "elu":
        if form.elu_bias:
            u = u.add_(form.elu_bias) if inplace else u + form.elu_bias
        return elu_plus_one(u, u).clamp_min(form.floor)
    if kind in ("softplus", "porf-softplus"):
        return nn.functional.softplus(u) + form.floor
    if kind == "sigmoid2":
        return torch.sigmoid(u).square()
    raise ValueError(f"unknown feature map {kind!r}; choose one of: {', '.join(FEATURE_MAPS)}")


def _paper_chunk(
    kind: str,
    x: Tensor,
    weights: Tensor,
    m: int,
    form: MapForm,
    phase: Tensor | None,
    is_query: bool,
    key_padding_mask: Tensor | None,
    out: Tensor | None,
) -> FeatureChunk:
    """A paper map's features of x (B, H, N, d) in factored form: favor's with alpha 1, softmaxfeat's as
    sqrt(M) softmax, the others as values f(u) with row weights sqrt(M) / Z(x)."""
    if kind == "favor":
        return _favor_chunk(x, weights, m**-0.5, is_query, key_padding_mask, out, norm_coef=0.5, eps=0.0)
    u = project(x, weights, out)
    if kind == "softmaxfeat":
        return FeatureChunk(torch.softmax(u, dim=-1), math.sqrt(m))
    values = _paper_values(kind, u, form, phase)
    normaliser = values.sum(dim=-1, keepdim=True).clamp_min(form.floor)
    return FeatureChunk(values, row_weights=math.sqrt(m) / normaliser)


def feature_chunk(
    kind: str,
    x: Tensor,
    omega: Tensor,
    *,
    is_query: bool,
    key_padding_mask: Tensor | None = None,
    out: Tensor | None = None,
    weights: Tensor | None = None,
    form: MapForm = SCALED,
    phase: Tensor | None = None,
) -> FeatureChunk:
    """Features of x (B, H, N, d) for omega (H or 1, M, d) in `form` in factored form (`FeatureChunk`); see
    `feature_values`. `phase` (H or 1, M): cos2's phases in the paper form.

    A block of rows of a longer sequence gives that block's rows of the sequence's features once the
    kernel combines the blocks' log-scales (favor keys); every other map is position by position.
    `out` (B, H, N, M_out): scratch the values may be written into; `weights`: `projection_weights(omega,
    B, form.input_scale(kind, d), heads=H)` when the caller already holds them.
    """
    m = omega.shape[-2]
    if weights is None:
        weights = projection_weights(omega, x.shape[0], form.input_scale(kind, x.shape[-1]), x.dtype, x.shape[1])
    if form.paper and kind != "trig":
        phase = None if phase is None else per_head(phase, x.shape[1])
        return _paper_chunk(kind, x, weights, m, form, phase, is_query, key_padding_mask, out)
    scale = m**-0.5
    if kind == "favor":
        return _favor_chunk(x, weights, scale, is_query, key_padding_mask, out)
    if kind == "trig":
        return FeatureChunk(trig_features(x, weights, out), scale)
    return FeatureChunk(_unscaled_features(kind, project(x, weights, out)), scale)


def feature_values(
    kind: str,
    x: Tensor,
    omega: Tensor,
    *,
    is_query: bool,
    key_padding_mask: Tensor | None = None,
    form: MapForm = SCALED,
    phase: Tensor | None = None,
) -> Tensor:
    """Features of x (B, H, N, d) for omega (H or 1, M, d) -> (B, H, N, M) (2M for trig), in `form` (default scaled).

    Differentiable in x and omega. Only `favor` depends on is_query / key_padding_mask: its stabilising
    max is per position for queries and over features and real positions for keys (a constant factor
    per row or per (batch, head), cancelled by the attention's normaliser).
    """
    return feature_chunk(
        kind, x, omega, is_query=is_query, key_padding_mask=key_padding_mask, form=form, phase=phase
    ).materialise()


NATIVE_PAPER_KINDS = {
    "softmaxfeat": "softmaxfeat",
    "elu": "elu-paper",
    "softplus": "softplus",
    "porf-softplus": "softplus",
    "sigmoid2": "sigmoid2",
    "cos2": "cos2",
}


def paper_native_spec(kind: str, weights: Tensor, form: MapForm, phase: Tensor | None) -> NativeSpec:
    """The fused kernels' rendering of a paper map (`_paper_chunk`): favor's exp(u - |x|^2/2) / sqrt(M); the others
    f(u) with keys reweighted by sqrt(M) / max(sum f, floor) in the kernel. Queries keep f: their row weight, and
    softmaxfeat's normaliser and sqrt(M), cancel in the attention's ratio (the guard aside, which positive features
    never reach)."""
    if kind == "favor":
        return NativeSpec("favor", weights, weights.shape[-1] ** -0.5, 0.0, 0.5)
    phase = None if phase is None else phase.to(weights.dtype).contiguous()
    return NativeSpec(
        NATIVE_PAPER_KINDS[kind],
        weights,
        floor=form.floor,
        bias=form.elu_bias if kind == "elu" else 0.0,
        phase=phase if kind == "cos2" else None,
    )


class RandomFeatureMap(FeatureMap):
    """phi(x) built from omega^T x in a `MapForm`, omegas (H, M, d) held as a fixed buffer `omega` (never trained);
    cos2 in the paper form also holds its phases `phase` (H, M) (None otherwise). H = 1 serves any head count."""

    def __init__(
        self,
        head_dim: int,
        num_heads: int,
        num_features: int,
        kind: str = "favor",
        seed: int = 0,
        *,
        orthogonal: bool = True,
        scaling: RowNorms = "chi",
        form: MapForm = SCALED,
        omega_scale: float = 1.0,
        radius: float | None = None,
    ):
        super().__init__()
        if kind not in FEATURE_MAPS:
            raise ValueError(f"unknown feature map {kind!r}; choose one of: {', '.join(FEATURE_MAPS)}")
        self.kind, self.seed, self.form = kind, seed, form
        self.orthogonal = orthogonal or kind == "porf-softplus"
        self.scaling = "chi" if kind == "porf-softplus" else scaling
        self.omega_scale, self.radius = omega_scale, radius
        self.num_features = 2 * num_features if kind == "trig" else num_features
        self.positive = kind != "trig"
        self.register_buffer("omega", self._draw(num_heads, num_features, head_dim, 0))
        phases = form.paper and kind == "cos2"
        self.register_buffer("phase", draw_phases(num_heads, num_features, seed) if phases else None)
        self.register_buffer("draw", torch.zeros((), dtype=torch.long))  # redraws so far; omegas of draw k are seeded

    def new_feature_map(self) -> None:
        """Replace the omegas (and cos2's phases) by the next seeded draw (seed, head, draw + 1)."""
        self.draw += 1
        h, m, d = self.omega.shape
        self.omega.copy_(self._draw(h, m, d, int(self.draw)))
        if self.phase is not None:
            self.phase.copy_(draw_phases(h, m, self.seed, int(self.draw)))

    def _draw(self, heads: int, num_features: int, dim: int, draw: int) -> Tensor:
        """The omegas of draw `draw` (H, M, d): seeded, times omega_scale, projected onto the radius (if any)."""
        omega = (
            draw_omegas(
                heads, num_features, dim, self.seed, orthogonal=self.orthogonal, scaling=self.scaling, draw=draw
            )
            * self.omega_scale
        )
        return omega if self.radius is None else project_to_ball(omega, self.radius)

    def _weights(self, x: Tensor) -> Tensor:
        """alpha omega^T laid out for x's batch and heads (`projection_weights`), kept while the omegas are unchanged."""
        (batch, heads, _, d), alpha = x.shape, self.form.input_scale(self.kind, x.shape[-1])
        return self.derived(
            "weights",
            lambda: projection_weights(self.omega, batch, alpha, x.dtype, heads),
            self.omega,
            key=(batch, heads, d, x.dtype),
        )

    def native_spec(self, x: Tensor) -> NativeSpec | None:
        """Where the fused kernels compute this form exactly (omega^T alpha as (H or 1, d, M) and the map's
        constants): every map of the paper form, and favor, elu and trig of the scaled one; None (the PyTorch path)
        for softplus, sigmoid2, cos2, softmaxfeat and porf-softplus in the scaled form."""
        per_head(self.omega, x.shape[1])  # one error for a head count the omegas cannot serve, on every path
        paper = self.form.paper and self.kind != "trig"  # trig has one form
        if not paper and self.kind not in ("favor", "elu", "trig"):
            return None
        d, m = x.shape[-1], self.omega.shape[-2]
        alpha = self.form.input_scale(self.kind, d)
        weights = self.derived(
            "native",
            lambda: projection_weights(self.omega, 1, alpha, x.dtype).contiguous(),
            self.omega,
            key=(d, x.dtype),
        )
        if paper:
            return paper_native_spec(self.kind, weights, self.form, self.phase)
        favor = self.kind == "favor"
        return NativeSpec(self.kind, weights, m**-0.5, FAVOR_EPS if favor else 0.0, d**-0.5 / 2 if favor else 0.0)

    def query_chunk(self, x: Tensor, out: Tensor | None = None) -> FeatureChunk:
        return feature_chunk(
            self.kind, x, self.omega, is_query=True, out=out, weights=self._weights(x), form=self.form, phase=self.phase
        )

    def key_chunk(self, x: Tensor, key_padding_mask: Tensor | None = None, out: Tensor | None = None) -> FeatureChunk:
        return feature_chunk(
            self.kind,
            x,
            self.omega,
            is_query=False,
            key_padding_mask=key_padding_mask,
            out=out,
            weights=self._weights(x),
            form=self.form,
            phase=self.phase,
        )

    @property
    def causal_anchor(self) -> bool:
        """favor's keys carry a stabiliser, which the causal form fixes by the first real key."""
        return self.kind == "favor"

    def causal_key_chunk(
        self, x: Tensor, key_padding_mask: Tensor | None = None, anchor: Tensor | None = None
    ) -> tuple[FeatureChunk, Tensor | None]:
        """Key features of the causal form: favor's stabilised by the first real key's exponent rather than the
        sequence's largest, which later keys would move (`causal_favor_keys`); the others position by position."""
        if self.kind != "favor":
            return FeatureChunk(self.forward_keys(x, key_padding_mask)), None
        paper = self.form.paper
        return causal_favor_keys(
            x,
            self._weights(x),
            self.omega.shape[-2] ** -0.5,
            key_padding_mask,
            anchor,
            norm_coef=0.5 if paper else None,
            eps=0.0 if paper else FAVOR_EPS,
        )

    def cost(self, n: int, d: int) -> dict[str, float]:
        """FLOPs per (batch, head) of the features of n queries and n keys, and bytes of the omegas."""
        h, m, _ = self.omega.shape
        return {"flops": random_feature_flops(self.kind, n, d, m), "bytes": 4.0 * h * m * d}


@dataclasses.dataclass
class RandomFeaturesConfig(ShortConvConfig):
    feature_map: FeatureMapKind = option("favor", "feature map applied to u = omega^T x (see docs/paper.md)")
    form: FormName = option(
        "paper",
        "paper: the maps of docs/paper.md (temperature, floor, l1 renormalisation to sqrt(M) of queries and "
        "keys except favor and softmaxfeat, cos2 phases, favor exp(u - |x|^2/2) / sqrt(M)); scaled: the earlier "
        "forms (x scaled by d^-1/4, f(u) / sqrt(M), favor + eps 1e-6, cos2 without phases, orthogonal omegas)",
    )
    temperature: float = option(1.0, "paper form: tau dividing u in elu, softplus, sigmoid2, softmaxfeat (ours: 1)")
    floor: float = option(1e-6, "paper form: floor of elu and softplus, and guard of the normaliser Z (ours: 1e-6)")
    elu_bias: float = option(0.0, "paper form: the bias b in elu(u / tau + b), the same for every feature")
    num_features: int = option(256, "number of random frequencies M per head (trig gives 2M features)", maximum=65536)
    orthogonal: bool | None = option(
        None,
        "orthogonal Gaussian blocks (True) or i.i.d. Gaussian omegas (False); None: the form's own "
        "(paper: i.i.d. except porf-softplus; scaled: orthogonal)",
    )
    row_norms: RowNorms = option("chi", "row norms of orthogonal blocks: chi (Gaussian-like) or sqrt-d")
    eps: float | None = option(
        None,
        "guard keeping the linear-attention normaliser away from zero; None: 1e-6, or 1e-30 for the paper's "
        "favor, whose features carry an arbitrary stabilising scale that a guard of 1e-6 would swamp",
    )
    omega_scale: float = option(1.0, "initial omegas times this scale (N(0, s^2 I) rows; 1: the paper's N(0, I))")
    projection_radius: float | None = option(
        None,
        "control: after the draw, project every omega longer than this radius back onto its sphere, as phase "
        "A's first step does with no force and no noise (the projected Vanilla twin); None: no projection",
    )
    projection_units: Literal["sqrt_dim", "absolute"] = option(
        "sqrt_dim", "units of projection_radius, as phase A's radius_units: sqrt(head_dim) or absolute"
    )

    def __post_init__(self) -> None:
        require(self.num_features >= 1, f"num_features={self.num_features} must be at least 1")
        require(self.eps is None or self.eps > 0, f"eps={self.eps} must be positive")
        require(self.temperature > 0, f"temperature={self.temperature} must be positive")
        require(self.floor > 0, f"floor={self.floor} must be positive")
        require(self.omega_scale > 0, f"omega_scale={self.omega_scale} must be positive")
        require(
            self.projection_radius is None or self.projection_radius > 0,
            f"projection_radius={self.projection_radius} must be positive (None: no projection)",
        )
        require(
            self.orthogonal is not False or self.feature_map != "porf-softplus",
            "feature_map='porf-softplus' always uses orthogonal omegas; drop orthogonal=False",
        )

    def map_form(self) -> MapForm:
        """The `MapForm` these options ask for."""
        if self.form == "scaled":
            return SCALED
        return MapForm(True, self.temperature, self.floor, self.elu_bias)

    def initial_radius(self) -> float | None:
        """The radius the initial omegas are projected onto, in absolute units (None: no projection)."""
        if self.projection_radius is None:
            return None
        return self.projection_radius * (math.sqrt(self.head_dim) if self.projection_units == "sqrt_dim" else 1.0)

    def guard(self) -> float:
        """The normaliser guard: `eps`, else the form's default."""
        if self.eps is not None:
            return self.eps
        return 1e-30 if self.form == "paper" and self.feature_map == "favor" else 1e-6

    def orthogonal_omegas(self) -> bool:
        """Whether the omegas are drawn in orthogonal blocks (`orthogonal`, else the form's default)."""
        if self.orthogonal is not None:
            return self.orthogonal
        return self.form == "scaled" or self.feature_map == "porf-softplus"


@register_attention(
    "random-features",
    config=RandomFeaturesConfig,
    causal=True,
    normalised=unfiltered,
    positive_features=lambda cfg: cfg.feature_map != "trig",
)
class RandomFeaturesAttention(LinearKernelAttention):
    """Vanilla random-feature attention: fixed random omegas, a choice of feature map (trig is not positive)."""

    feature_map_class: type[RandomFeatureMap] = RandomFeatureMap  # the Coulomb model swaps in learnable particles

    def __init__(self, cfg: RandomFeaturesConfig):
        super().__init__(
            self.feature_map_class(
                cfg.head_dim,
                cfg.num_heads,
                cfg.num_features,
                cfg.feature_map,
                cfg.seed,
                orthogonal=cfg.orthogonal_omegas(),
                scaling=cfg.row_norms,
                form=cfg.map_form(),
                omega_scale=cfg.omega_scale,
                radius=cfg.initial_radius(),
            ),
            eps=cfg.guard(),
            causal=cfg.causal,
            short_conv=short_conv_for(cfg),
        )
        self.cfg = cfg

    @property
    def feature_form(self) -> str:
        """The form this attention's map computes, recorded with results (e.g. 'paper softplus, tau 1.0, floor 1e-06')."""
        fmap = self.feature_map
        scale = f", omegas x{fmap.omega_scale:g}" if fmap.omega_scale != 1.0 else ""
        projected = f", omegas projected to radius {fmap.radius:g}" if fmap.radius is not None else ""
        if not fmap.form.paper or fmap.kind == "trig":
            return f"scaled {fmap.kind}{scale}{projected}"
        extras = f", tau {fmap.form.temperature}, floor {fmap.form.floor}" if fmap.kind != "favor" else ""
        bias = f", elu bias {fmap.form.elu_bias}" if fmap.kind == "elu" else ""
        return f"paper {fmap.kind}{extras}{bias}{scale}{projected}"
