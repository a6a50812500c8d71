"""Kernelized attention with relative positional encoding (Luo, Li, Cai, He, Peng, Zheng, Ke, Wang, Liu, NeurIPS
2021, arXiv 2106.12566: "Stable, Fast and Accurate"), by FFT in O(N log N).

Softmax attention with RPE, exp(q_i . k_j + b_{j-i}), with its exponential kernel estimated by positive random
features: w_ij = c(i - j) phi(q_i) . phi(k_j), c = exp(b), out_i = sum_j w_ij v_j / sum_j w_ij. C_ij = c(i - j) is
a Toeplitz matrix, so the sums over j are Toeplitz products along the sequence, which the FFT computes in
O(N log N) per feature and value channel (`fft`). q and k are L2-normalised before the features, the paper's
remedy for the random features' variance (which grows with |q + k|) and so for kernelized attention's unstable
training; the positional weights then carry what normalising takes from the logits' range.

phi(x) = M^-1/2 exp(omega x - |x|^2 / 2) (Performer's positive random features, E[phi(x) . phi(y)] = exp(x . y)),
omega orthogonal Gaussian blocks with chi row norms drawn once per head from the seed (`random_projections`,
as Performer's), never redrawn. b_r, one learned scalar per head and relative position r = j - i, starts at 0;
positions further apart than `max_distance` K share b_{+-K} (Shaw et al.'s clipping, our choice where the paper
leaves the range open); a causal attention keeps r = -K .. 0 only. Relative positions count padded positions too;
padded keys are never read.

Renderings (this folder): `naive` (the dense Toeplitz matrix, also the training form up to DENSE_UP_TO positions,
where it is the faster: option `form`), `fft` (training beyond), `recurrent` (causal decoding in a fixed-size
state: the last K keys each with their own weight, the earlier ones in one sum at weight c(K)).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch
from torch import Tensor, nn

from attnbench.baselines.kernelized_rpe.fft import fft_rpe_attention
from attnbench.baselines.kernelized_rpe.naive import naive_rpe_attention, offset_weights
from attnbench.baselines.kernelized_rpe.recurrent import init_window, rpe_prefill, rpe_step
from attnbench.baselines.random_projections import draw_omegas, per_head
from attnbench.kernels.recurrent_attention import PrefillsState, RecurrentAttention, State
from attnbench.kernels.short_conv import ShortConvConfig, unfiltered
from attnbench.options import option
from attnbench.registry import register_attention

# the dense form's N x N weights cost N^2 (M + D), the FFT's transforms about 3 N M D log2(3K) with a large constant:
# at N = 64 (M 64, D 32, a training step on CPU) the FFT took some 20 times the dense form's time
DENSE_UP_TO = 256


@dataclasses.dataclass
class KernelizedRPEConfig(ShortConvConfig):
    num_features: int = option(64, "M positive random features per head", minimum=1, maximum=65536)
    max_distance: int = option(
        128, "K: relative positions further apart than K share one learned bias (and decoding keeps K keys)", minimum=1
    )
    form: Literal["auto", "fft", "dense"] = option(
        "auto",
        "training form: fft (the Toeplitz sums by FFT, O(N log K) per channel), dense (the N x N weights, O(N^2)), "
        f"auto (dense up to {DENSE_UP_TO} positions, where it is the faster, fft beyond); the route is recorded",
    )


@register_attention(
    "kernelized-rpe", config=KernelizedRPEConfig, causal=True, recurrent_state=True, normalised=unfiltered
)
class KernelizedRPEAttention(PrefillsState, RecurrentAttention):
    """Positive random features of L2-normalised q, k, weighted by exp(b_{j-i}) per relative position, by FFT."""

    padding_takes_positions = True  # relative positions count padded tokens; the ring buffer keeps their slots

    def __init__(self, cfg: KernelizedRPEConfig):
        super().__init__(cfg)
        self.register_buffer("omega", draw_omegas(cfg.num_heads, cfg.num_features, cfg.head_dim, cfg.seed))
        offsets = cfg.max_distance + 1 if cfg.causal else 2 * cfg.max_distance + 1
        self.position_bias = nn.Parameter(torch.zeros(cfg.num_heads, offsets))  # b_r, r = -K .. K (causal: .. 0)

    def features(self, x: Tensor) -> Tensor:
        """phi of the L2-normalised rows: (B, H, N, D) -> (B, H, N, M)."""
        x = nn.functional.normalize(x, dim=-1)
        omega = per_head(self.omega, x.shape[1]).to(x.dtype)
        return torch.exp(x @ omega.transpose(-2, -1) - 0.5) / self.cfg.num_features**0.5

    def bias(self, heads: int) -> Tensor:
        """b (heads, offsets), one head's shared by every head when built with num_heads 1."""
        return per_head(self.position_bias, heads)

    def parallel(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        form = self.cfg.form if self.cfg.form != "auto" else "dense" if q.shape[2] <= DENSE_UP_TO else "fft"
        self._took(form)
        if form == "dense":
            return self.naive(q, k, v, mask)
        weights = offset_weights(self.bias(q.shape[1]).to(q.dtype), self.cfg.max_distance, self.causal, q.shape[2])
        return fft_rpe_attention(self.features(q), self.features(k), v, weights, self.cfg.max_distance, mask)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        weights = offset_weights(self.bias(q.shape[1]).to(q.dtype), self.cfg.max_distance, self.causal, q.shape[2])
        return naive_rpe_attention(self.features(q), self.features(k), v, weights, mask)

    def core_state(self, batch_size: int, heads: int, dtype: torch.dtype, device: torch.device) -> State:
        cfg = self.cfg
        return init_window(batch_size, heads, cfg.max_distance, cfg.num_features, cfg.head_dim, dtype, device)

    def core_step(
        self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State, real_t: Tensor | None = None
    ) -> tuple[Tensor, State]:
        weights = self.bias(q_t.shape[1]).to(q_t.dtype).exp()  # c(d) at column K - d, d = 0 .. K
        near, far = weights[:, 1:].flip(-1), weights[:, :1]
        phi = self.features(torch.stack([q_t, k_t], dim=2))
        return rpe_step(phi[:, :, 0], phi[:, :, 1], v_t, state, near, far, real_t)

    def core_prefill(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor) -> State:
        return rpe_prefill(self.features(k), v, real, self.cfg.max_distance)

    def state_size(self, context_length: int, dtype: torch.dtype = torch.float32) -> int:
        """Bytes of one sequence's decoding state, whatever the context length: K slots of H x (M + D + 1), the far
        sum H x M x (D + 1), the position (int64); with `short_conv`, its window too."""
        h, d, m, k = self.cfg.num_heads, self.cfg.head_dim, self.cfg.num_features, self.cfg.max_distance
        size = torch.empty((), dtype=dtype).element_size()
        conv = 0 if self.short_conv is None else self.short_conv.state_bytes(h, d, dtype)
        return h * (k * (m + d + 1) + m * (d + 1)) * size + 8 + conv
