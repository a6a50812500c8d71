"""Public implementations behind our attention interface, to run beside ours on identical inputs.

Thin adapters (q, k, v (B, H, N, D), key_padding_mask (B, N) True = real -> (B, H, N, D)) around
- `PerformerPytorch`: performer-pytorch's `FastAttention` with the softmax kernel (FAVOR+), its
  projection matrix replaced by our seeded draw (`draw_omegas`, head 0: theirs is one matrix shared
  by all heads). Their code scales q and k by d^-1/4 itself, so the adapter passes them unscaled (a
  known trap: scaling twice), and never sets `generalized_attention` (the other trap: a ReLU kernel
  without it silently runs the softmax kernel). Theirs differs from ours in eps (1e-4 inside the
  exponential features, ours 1e-6), in the key stabiliser (max of w.x alone, ours of w.x - |x|^2/2),
  in having no normaliser guard, and in padding: their attention only zeroes padded values, so
  padded keys still enter the normaliser (the adapter does the same, hence padding_mask=False).
- `NystromPeer`: nystrom-attention's `NystromAttention` with its input and output projections
  replaced by identities, so q, k, v go straight in; the convolution weights are drawn from the seed
  as ours are. Theirs pads lengths that the landmarks do not divide at the front (zeros that enter
  the landmark means when no mask is given) and scales the pinv's initial guess by the maximum over
  the whole batch (the reported bug; ours per matrix).

Used through the plugin mechanism as "attnbench.baselines.peers:PerformerPytorch" (suites/peers.yaml). Not
imported by `import baselines`: the packages are the optional extra `peers`.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from attnbench.baselines.feature_maps import FavorMap
from attnbench.baselines.nystromformer import NystromConfig, nystrom_cost
from attnbench.baselines.random_projections import RowNorms, draw_omegas, seeded_generator
from attnbench.errors import UserError
from attnbench.kernels.linear.attention import linear_kernel_cost
from attnbench.kernels.masks import key_padding_mask as padding_mask
from attnbench.options import option, require
from attnbench.registry import AttentionConfig, register_attention

try:
    from nystrom_attention import NystromAttention
    from performer_pytorch import FastAttention
except ImportError as err:
    raise UserError(
        f"attnbench.baselines.peers needs the optional extra 'peers' ({err.name} is not installed); "
        f"install it with: pip install 'attnbench[peers]'"
    ) from None


@dataclasses.dataclass
class PeerPerformerConfig(AttentionConfig):
    num_features: int = option(256, "random features M (their nb_features)", maximum=65536)
    row_norms: RowNorms = option("chi", "row norms of the orthogonal blocks: chi (their ortho_scaling=0) or sqrt-d (1)")

    def __post_init__(self) -> None:
        require(self.num_features >= 1, f"num_features={self.num_features} must be at least 1")
        require(not self.causal, "the performer-pytorch adapter is non-causal only (causal=True given)")


@register_attention("performer-pytorch", config=PeerPerformerConfig, padding_mask=False)
class PerformerPytorch(nn.Module):
    """performer-pytorch's FastAttention (softmax kernel, FAVOR+) with our seeded projection matrix."""

    def __init__(self, cfg: PeerPerformerConfig):
        super().__init__()
        self.cfg = cfg
        self.fast = FastAttention(
            cfg.head_dim,
            nb_features=cfg.num_features,
            ortho_scaling=0 if cfg.row_norms == "chi" else 1,
            generalized_attention=False,
        )
        omega = draw_omegas(1, cfg.num_features, cfg.head_dim, cfg.seed, scaling=cfg.row_norms)[0]
        with torch.no_grad():
            self.fast.projection_matrix.copy_(omega)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        key_padding_mask = padding_mask(key_padding_mask, k)
        if key_padding_mask is not None:  # as their SelfAttention: padded values zeroed, keys left in
            v = v.masked_fill(~key_padding_mask[:, None, :, None], 0.0)
        return self.fast(q, k, v)

    def cost(self, batch: int, heads: int, n: int, d: int) -> dict[str, float]:
        """The FLOPs and bytes of our favor attention at the same number of features (the same algorithm)."""
        m = self.cfg.num_features
        return linear_kernel_cost(batch, heads, n, d, m, FavorMap.flops(n, d, m), 4.0 * m * d)


@register_attention("nystrom-attention", config=NystromConfig)
class NystromPeer(nn.Module):
    """nystrom-attention's NystromAttention, fed q, k, v directly (its projections replaced by identities)."""

    def __init__(self, cfg: NystromConfig):
        super().__init__()
        self.cfg = cfg
        self.inner = NystromAttention(
            cfg.num_heads * cfg.head_dim,
            dim_head=cfg.head_dim,
            heads=cfg.num_heads,
            num_landmarks=cfg.num_landmarks,
            pinv_iterations=cfg.pinv_iterations,
            residual=cfg.conv_kernel > 0,
            residual_conv_kernel=max(cfg.conv_kernel, 1),
        )
        self.inner.to_qkv, self.inner.to_out = nn.Identity(), nn.Identity()
        if cfg.conv_kernel:
            bound = cfg.conv_kernel**-0.5  # as our nystromformer draws its convolution from the seed
            with torch.no_grad():
                self.inner.res_conv.weight.uniform_(-bound, bound, generator=seeded_generator(cfg.seed))

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        key_padding_mask = padding_mask(key_padding_mask, k)
        b, h, n, d = q.shape
        x = torch.cat([q, k, v], dim=1).transpose(1, 2).reshape(b, n, 3 * h * d)  # their to_qkv output layout
        return self.inner(x, mask=key_padding_mask).view(b, n, h, d).transpose(1, 2)

    def cost(self, batch: int, heads: int, n: int, d: int) -> dict[str, float]:
        """The FLOPs and bytes of our Nystromformer at the same settings (the same algorithm)."""
        return nystrom_cost(
            batch, heads, n, d, min(self.cfg.num_landmarks, n), self.cfg.pinv_iterations, self.cfg.conv_kernel
        )
