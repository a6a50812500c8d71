"""Random-feature maps phi_omega(x) = f(omega^T x) with fixed random omegas (the paper's "Vanilla" kernels).

Feature maps (PAPER.md "Kernel and features"; u = omega^T x with x scaled by d^{-1/4} for every map,
Performer's scaling and **our default** for the others):

    favor          exp(u - |x|^2/2 - max) + eps   (Performer's positive features, stabilised)
    elu            elu(u) + 1
    softplus       log(1 + e^u)
    sigmoid2       sigmoid(u)^2
    cos2           cos(u)^2
    softmaxfeat    softmax of (u_1..u_M) over the M features
    porf-softplus  softplus(u), omegas always positive orthogonal random features (orthogonal, chi norms)
    trig           [sin(u), cos(u)] (RFA's; NOT positive, so the normaliser can change sign)

favor's max is taken of the whole exponent u - |x|^2/2 (the reference takes it of u alone: the same
estimator up to where eps sits; ours keeps the largest feature at 1, so eps stays negligible for
inputs of large norm, where the reference's features sink into eps).

Every map is scaled by M^{-1/2}, so phi(x)^T phi(x') = (1/M) sum_k f(omega_k^T x) f(omega_k^T x') is the
kernel estimate K(x, x') itself.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Literal

import numpy as np
import torch
from torch import Tensor, nn

from baselines.linear_kernel import FeatureChunk, FeatureMap, LinearKernelAttention, no_grad_recorded, scratch
from baselines.native import NativeSpec
from harness.options import option, require
from harness.registry import AttentionConfig, register_attention

FeatureMapKind = Literal["favor", "elu", "softplus", "sigmoid2", "cos2", "softmaxfeat", "porf-softplus", "trig"]
FEATURE_MAPS: tuple[str, ...] = FeatureMapKind.__args__
RowNorms = Literal["chi", "sqrt-d"]
FAVOR_EPS = 1e-6
# elementwise operations per projection u = omega^T x (cost accounting, one FLOP each): favor max, subtract, exp;
# elu clamp, exp, relu, add; softmaxfeat max, subtract, exp, sum, divide; trig sin, cos
ELEMENTWISE_OPS = {"favor": 3, "elu": 4, "softplus": 1, "porf-softplus": 1, "sigmoid2": 2, "cos2": 2,
                   "softmaxfeat": 5, "trig": 2}


def seeded_generator(*keys: int) -> torch.Generator:
    """A CPU generator seeded from several integers (e.g. seed, head, draw), well mixed."""
    state = np.random.SeedSequence([int(k) for k in keys]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def orthogonal_gaussian(num_rows: int, dim: int, generator: torch.Generator | None = None,
                        scaling: RowNorms = "chi") -> Tensor:
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


def draw_omegas(num_heads: int, num_features: int, dim: int, seed: int, *, orthogonal: bool = True,
                scaling: RowNorms = "chi", draw: int = 0) -> Tensor:
    """Random frequencies per head -> (H, M, d); head h uses a generator seeded from (seed, h, draw)."""
    out = []
    for head in range(num_heads):
        generator = seeded_generator(seed, head, draw)
        if orthogonal:
            out.append(orthogonal_gaussian(num_features, dim, generator, scaling))
        else:
            out.append(torch.randn(num_features, dim, generator=generator))
    return torch.stack(out)


def projection_weights(omega: Tensor, batch: int, alpha: float = 1.0, dtype: torch.dtype | None = None) -> Tensor:
    """alpha omega^T laid out for one batched product: omega (H, M, d) -> (batch * H, d, M) (a view for batch 1)."""
    w = (omega.to(dtype or omega.dtype) * alpha).transpose(-2, -1)
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


def _favor_chunk(x: Tensor, weights: Tensor, scale: float, is_query: bool,
                 key_padding_mask: Tensor | None, out: Tensor | None = None) -> FeatureChunk:
    """favor features of a block, phi = scale (exp(u - |x'|^2/2 - max) + eps), u = omega x', x' = x d^{-1/4}
    (folded into `weights`), factored as values exp(u - m_i) (m_i the row's largest u, so every value is in
    (0, 1]) times row weights.

    A query's max is over its own row, where |x'|^2/2 is a constant: its values are the features, no row
    weight. A key's row weight is exp(m_i - |x'_i|^2/2 - L), L the block's largest exponent (its log-scale,
    over real positions; padding gets weight 0), so that values * weight = exp(u - |x'|^2/2 - L).
    """
    u = project(x, weights, out)
    row_max = u.detach().amax(dim=-1, keepdim=True)  # (B, H, C, 1)
    values = u.sub_(row_max).exp_() if no_grad_recorded(u) else (u - row_max).exp()
    if is_query:
        return FeatureChunk(values, scale, FAVOR_EPS)
    d = x.shape[-1]
    row_log = row_max - (x * x).sum(dim=-1, keepdim=True) * (d ** -0.5 / 2)  # m_i - |x'_i|^2 / 2
    if key_padding_mask is not None:
        row_log = row_log.masked_fill(~key_padding_mask[:, None, :, None], -math.inf)
    log_scale = row_log.detach().amax(dim=-2, keepdim=True)  # (B, H, 1, 1): -inf for a block without real keys
    row_weights = torch.exp(row_log - log_scale.masked_fill(log_scale == -math.inf, 0.0))
    return FeatureChunk(values, scale, FAVOR_EPS, log_scale, row_weights)


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


def feature_chunk(kind: str, x: Tensor, omega: Tensor, *, is_query: bool,
                  key_padding_mask: Tensor | None = None, out: Tensor | None = None,
                  weights: Tensor | None = None) -> FeatureChunk:
    """Features of x (B, H, N, d) for omega (H, M, d) in factored form (`FeatureChunk`); see `feature_values`.

    A block of rows of a longer sequence gives that block's rows of the sequence's features once the
    kernel combines the blocks' log-scales (favor keys); every other map is position by position.
    `out` (B, H, N, M_out): scratch the values may be written into; `weights`: `projection_weights(omega,
    B, d^{-1/4})` when the caller already holds them.
    """
    scale = omega.shape[-2] ** -0.5
    if weights is None:
        weights = projection_weights(omega, x.shape[0], x.shape[-1] ** -0.25, x.dtype)
    if kind == "favor":
        return _favor_chunk(x, weights, scale, is_query, key_padding_mask, out)
    if kind == "trig":
        return FeatureChunk(trig_features(x, weights, out), scale)
    return FeatureChunk(_unscaled_features(kind, project(x, weights, out)), scale)


def feature_values(kind: str, x: Tensor, omega: Tensor, *, is_query: bool,
                   key_padding_mask: Tensor | None = None) -> Tensor:
    """Features f(omega^T x) / sqrt(M): x (B, H, N, d), omega (H, M, d) -> (B, H, N, M) (2M for trig).

    Differentiable in x and omega. Only `favor` depends on is_query / key_padding_mask: its stabilising
    max is per position for queries and over features and real positions for keys (a constant factor
    per row or per (batch, head), cancelled by the attention's normaliser).
    """
    return feature_chunk(kind, x, omega, is_query=is_query, key_padding_mask=key_padding_mask).materialise()


class RandomFeatureMap(FeatureMap):
    """phi(x) = f(omega^T x) / sqrt(M) with omegas (H, M, d) held as a fixed buffer `omega` (never trained)."""

    def __init__(self, head_dim: int, num_heads: int, num_features: int, kind: str = "favor", seed: int = 0,
                 *, orthogonal: bool = True, scaling: RowNorms = "chi"):
        super().__init__()
        if kind not in FEATURE_MAPS:
            raise ValueError(f"unknown feature map {kind!r}; choose one of: {', '.join(FEATURE_MAPS)}")
        self.kind, self.seed = kind, seed
        self.orthogonal = orthogonal or kind == "porf-softplus"
        self.scaling = "chi" if kind == "porf-softplus" else scaling
        self.num_features = 2 * num_features if kind == "trig" else num_features
        self.positive = kind != "trig"
        self.register_buffer("omega", draw_omegas(num_heads, num_features, head_dim, seed,
                                                  orthogonal=self.orthogonal, scaling=self.scaling))
        self.register_buffer("draw", torch.zeros((), dtype=torch.long))  # redraws so far; omegas of draw k are seeded

    def new_feature_map(self) -> None:
        """Replace the omegas by the next seeded draw (seed, head, draw + 1)."""
        self.draw += 1
        h, m, d = self.omega.shape
        self.omega.copy_(draw_omegas(h, m, d, self.seed, orthogonal=self.orthogonal, scaling=self.scaling,
                                     draw=int(self.draw)))

    def _weights(self, x: Tensor) -> Tensor:
        """omega^T d^{-1/4} laid out for x's batch (`projection_weights`), kept while the omegas are unchanged."""
        batch, d = x.shape[0], x.shape[-1]
        return self.derived("weights", lambda: projection_weights(self.omega, batch, d ** -0.25, x.dtype), self.omega,
                            key=(batch, d, x.dtype))

    def native_spec(self, x: Tensor) -> NativeSpec | None:
        """favor, elu and trig run fused: omega^T d^{-1/4} as (H, d, M), the maps' scale, eps and |x'|^2 / 2."""
        if self.kind not in ("favor", "elu", "trig"):
            return None
        d, m = x.shape[-1], self.omega.shape[-2]
        weights = self.derived("native", lambda: projection_weights(self.omega, 1, d ** -0.25, x.dtype).contiguous(),
                               self.omega, key=(d, x.dtype))
        favor = self.kind == "favor"
        return NativeSpec(self.kind, weights, m ** -0.5, FAVOR_EPS if favor else 0.0, d ** -0.5 / 2 if favor else 0.0)

    def query_chunk(self, x: Tensor, out: Tensor | None = None) -> FeatureChunk:
        return feature_chunk(self.kind, x, self.omega, is_query=True, out=out, weights=self._weights(x))

    def key_chunk(self, x: Tensor, key_padding_mask: Tensor | None = None, out: Tensor | None = None) -> FeatureChunk:
        return feature_chunk(self.kind, x, self.omega, is_query=False, key_padding_mask=key_padding_mask, out=out,
                             weights=self._weights(x))

    def forward_keys(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        return self.key_chunk(x, key_padding_mask).materialise()

    def cost(self, n: int, d: int) -> dict[str, float]:
        """FLOPs per (batch, head) of the features of n queries and n keys, and bytes of the omegas."""
        h, m, _ = self.omega.shape
        return {"flops": random_feature_flops(self.kind, n, d, m), "bytes": 4.0 * h * m * d}


@dataclasses.dataclass
class RandomFeaturesConfig(AttentionConfig):
    feature_map: FeatureMapKind = option("favor", "feature map f applied to omega^T x (see PAPER.md)")
    num_features: int = option(256, "number of random frequencies M per head (trig gives 2M features)",
                                maximum=65536)
    orthogonal: bool = option(True, "orthogonal Gaussian blocks (True) or i.i.d. Gaussian omegas (False)")
    row_norms: RowNorms = option("chi", "row norms of orthogonal blocks: chi (Gaussian-like) or sqrt-d")
    eps: float = option(1e-6, "guard keeping the linear-attention normaliser away from zero")

    def __post_init__(self) -> None:
        require(self.num_features >= 1, f"num_features={self.num_features} must be at least 1")
        require(self.eps > 0, f"eps={self.eps} must be positive")
        require(self.orthogonal or self.feature_map != "porf-softplus",
                "feature_map='porf-softplus' always uses orthogonal omegas; drop orthogonal=False")


@register_attention("random-features", config=RandomFeaturesConfig, causal=True,
                    positive_features=lambda cfg: cfg.feature_map != "trig")
class RandomFeaturesAttention(LinearKernelAttention):
    """Vanilla random-feature attention: fixed random omegas, a choice of feature map (trig is not positive)."""

    feature_map_class: type[RandomFeatureMap] = RandomFeatureMap  # the Coulomb model swaps in learnable particles

    def __init__(self, cfg: RandomFeaturesConfig):
        super().__init__(self.feature_map_class(cfg.head_dim, cfg.num_heads, cfg.num_features, cfg.feature_map,
                                                cfg.seed, orthogonal=cfg.orthogonal, scaling=cfg.row_norms),
                         eps=cfg.eps, causal=cfg.causal)
        self.cfg = cfg
