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

from baselines.linear_kernel import FeatureChunk, FeatureMap, LinearKernelAttention
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


def project(x: Tensor, omega: Tensor, bias: Tensor | None = None, alpha: float = 1.0) -> Tensor:
    """alpha x omega^T (+ bias) as one batched matrix product: x (..., N, d), omega (..., M, d), bias (..., N, 1)
    -> (..., N, M), leading dimensions broadcast (e.g. x (B, H, N, d) with omega (H, M, d))."""
    n, d, m = x.shape[-2], x.shape[-1], omega.shape[-2]
    batch = torch.broadcast_shapes(x.shape[:-2], omega.shape[:-2])
    x3 = x.expand(*batch, n, d).reshape(-1, n, d)
    w3 = omega.to(x.dtype).transpose(-2, -1).expand(*batch, d, m).reshape(-1, d, m)
    if bias is None:
        return torch.baddbmm(x3.new_zeros(()), x3, w3, beta=0.0, alpha=alpha).view(*batch, n, m)
    return torch.baddbmm(bias.expand(*batch, n, 1).reshape(-1, n, 1), x3, w3, alpha=alpha).view(*batch, n, m)


def elu_plus_one(u: Tensor) -> Tensor:
    """elu(u) + 1 = exp(min(u, 0)) + max(u, 0): about twice as fast as torch's elu on CPU, in place where no
    gradient is recorded; differentiable (with relu's gradient at 0, so the derivative at 0 is elu's 1)."""
    low = u.clamp_max(0.0).exp_()
    if torch.is_grad_enabled() and u.requires_grad:
        return low + torch.relu(u)
    return low.add_(u.clamp_min(0.0))


def sin_cos(u: Tensor) -> Tensor:
    """[sin(u), cos(u)] along the last axis: (..., M) -> (..., 2M); written into one buffer where no gradient
    is recorded, concatenated otherwise."""
    if torch.is_grad_enabled() and u.requires_grad:
        return torch.cat([torch.sin(u), torch.cos(u)], dim=-1)
    out = u.new_empty(*u.shape[:-1], 2 * u.shape[-1])
    torch.sin(u, out=out[..., :u.shape[-1]])
    torch.cos(u, out=out[..., u.shape[-1]:])
    return out


def _favor_chunk(x: Tensor, omega: Tensor, scale: float, is_query: bool,
                 key_padding_mask: Tensor | None) -> FeatureChunk:
    """favor features of a block: values exp(u - |x'|^2/2 - max) * scale, offset scale * eps; keys carry their max.

    A query's max is over its own row, where |x'|^2/2 is a constant: exp(w.x' - max_w w.x') is the same
    value, so queries skip the norm.
    """
    d = x.shape[-1]
    half_norm = None if is_query else (x * x).sum(dim=-1, keepdim=True).mul_(-(d ** -0.5) / 2)  # -|x'|^2 / 2
    u = project(x, omega, half_norm, alpha=d ** -0.25)  # x' = x d^{-1/4}, folded into the product
    stabiliser = u.detach().amax(dim=-1, keepdim=True)  # (B, H, N, 1)
    log_scale = None
    if not is_query:
        if key_padding_mask is not None:
            stabiliser = stabiliser.masked_fill(~key_padding_mask[:, None, :, None], -math.inf)
        log_scale = stabiliser.amax(dim=-2, keepdim=True)  # (B, H, 1, 1): over real positions too
        stabiliser = log_scale.masked_fill(log_scale == -math.inf, 0.0)  # a block with no real token
    values = u.sub_(stabiliser - math.log(scale)).exp_()  # = scale exp(u - max), in place (autograd keeps exp's output)
    return FeatureChunk(values, 1.0, scale * FAVOR_EPS, log_scale)


def _unscaled_features(kind: str, u: Tensor) -> Tensor:
    """f(u) of an elementwise (or softmax / trig) map, before the 1/sqrt(M) scale."""
    if kind == "elu":
        return elu_plus_one(u)
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
                  key_padding_mask: Tensor | None = None) -> FeatureChunk:
    """Features of x (B, H, N, d) for omega (H, M, d) in factored form (`FeatureChunk`); see `feature_values`.

    A block of rows of a longer sequence gives that block's rows of the sequence's features once the
    kernel combines the blocks' log-scales (favor keys); every other map is position by position.
    """
    scale = omega.shape[-2] ** -0.5
    if kind == "favor":
        return _favor_chunk(x, omega, scale, is_query, key_padding_mask)
    u = project(x, omega, alpha=x.shape[-1] ** -0.25)
    return FeatureChunk(_unscaled_features(kind, u), scale)


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

    def query_chunk(self, x: Tensor) -> FeatureChunk:
        return feature_chunk(self.kind, x, self.omega, is_query=True)

    def key_chunk(self, x: Tensor, key_padding_mask: Tensor | None = None) -> FeatureChunk:
        return feature_chunk(self.kind, x, self.omega, is_query=False, key_padding_mask=key_padding_mask)

    def forward_keys(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        return self.key_chunk(x, key_padding_mask).materialise()

    def cost(self, n: int, d: int) -> dict[str, float]:
        """FLOPs per (batch, head) of the features of n queries and n keys, and bytes of the omegas."""
        h, m, _ = self.omega.shape
        return {"flops": random_feature_flops(self.kind, n, d, m), "bytes": 4.0 * h * m * d}


@dataclasses.dataclass
class RandomFeaturesConfig(AttentionConfig):
    feature_map: FeatureMapKind = option("favor", "feature map f applied to omega^T x (see PAPER.md)")
    num_features: int = option(256, "number of random frequencies M per head (trig gives 2M features)")
    orthogonal: bool = option(True, "orthogonal Gaussian blocks (True) or i.i.d. Gaussian omegas (False)")
    row_norms: RowNorms = option("chi", "row norms of orthogonal blocks: chi (Gaussian-like) or sqrt-d")
    eps: float = option(1e-6, "guard keeping the linear-attention normaliser away from zero")

    def __post_init__(self) -> None:
        require(self.num_features >= 1, f"num_features={self.num_features} must be at least 1")
        require(self.eps > 0, f"eps={self.eps} must be positive")
        require(self.orthogonal or self.feature_map != "porf-softplus",
                "feature_map='porf-softplus' always uses orthogonal omegas; drop orthogonal=False")


@register_attention("random-features", config=RandomFeaturesConfig, causal=True, positive_features=False)
class RandomFeaturesAttention(LinearKernelAttention):
    """Vanilla random-feature attention: fixed random omegas, a choice of feature map (trig is not positive)."""

    feature_map_class: type[RandomFeatureMap] = RandomFeatureMap  # the Coulomb model swaps in learnable particles

    def __init__(self, cfg: RandomFeaturesConfig):
        super().__init__(self.feature_map_class(cfg.head_dim, cfg.num_heads, cfg.num_features, cfg.feature_map,
                                                cfg.seed, orthogonal=cfg.orthogonal, scaling=cfg.row_norms),
                         eps=cfg.eps, causal=cfg.causal)
        self.cfg = cfg
