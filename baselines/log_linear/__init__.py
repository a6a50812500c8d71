"""Log-linear attention (Guo, Yang, Goel, Xing, Dao, Kim 2025, arXiv 2506.04761) over Mamba-2: Log-Linear Mamba-2.

Mamba-2's recurrence (`attnbench.baselines.mamba2`: C, B, dt-scaled x, the scalar decay exp(dt A), D skip, gate z)
with its one state replaced by a Fenwick tree of states: query t reads the prefix of keys cut into buckets of
2^(l - 1) keys by its binary digits, level l = bit_length(t XOR s) (level 0 the key t itself), and weighs each
bucket by its own lambda_t^(l) = softplus(L_(h, l) x_t . w_l) > 0 (fla's layer: L = 1, the projection w_l per head
and level; here of the head's x). With every lambda = 1 it is Mamba-2. Training costs O(N log N), decoding keeps
O(log N) states of (D, D) per head: the state grows by one level each time the count of tokens passes a power of
two (the tensors carried are counted as they are, zeros for the empty buckets included).

Renderings (this folder, as fla's ops/log_linear_attn): `naive` (the definition, O(N^2)), `chunk` (training:
chunks of `chunk_size` = 2^c positions, a Fenwick tree over the chunks), `recurrent` (the decoding step). Padded
positions take no position (they are removed, as fla's layers unpad). `num_levels` bounds the length:
2^(num_levels - 1) tokens. Encoder (causal=False) form, ours: the keys after the query by the same rule on the
reversed sequence, as the two-sided decay of GLA's and Mamba-2's encoder. No fla route here (fla's
chunk_log_linear_attn is not wired): `backend` stays `pytorch`.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch
from torch import Tensor, nn

from attnbench.baselines.log_linear.chunk import chunk_log_linear_packed, compacted
from attnbench.baselines.log_linear.naive import bit_length, naive_log_linear, naive_log_linear_encoder, positions
from attnbench.baselines.log_linear.recurrent import log_linear_step
from attnbench.baselines.mamba2 import Mamba2Attention, Mamba2Config
from attnbench.baselines.random_projections import seeded_generator
from attnbench.errors import ConfigError
from attnbench.kernels.gated_recurrence import Pass, Renderings
from attnbench.kernels.recurrent_attention import State
from attnbench.options import option, require
from attnbench.registry import register_attention

COUNT_BITS = 48  # token counts below 2^48
LEVEL_STREAM = 2  # lambda's projection draws from its own stream of the seed, apart from Mamba-2's parameters


def chunk_log_linear(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, scales: Tensor, real: Tensor, chunk: int
) -> tuple[Tensor, None]:
    """`naive_log_linear` in chunks of `chunk` positions: every row's real tokens packed first."""
    run = functools.partial(chunk_log_linear_packed, chunk=chunk)
    return compacted(run, q, k, v, log_gate, scales, real), None


def two_sided(run: Pass, q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, scales: Tensor, real: Tensor) -> Tensor:
    """The encoder form (`naive_log_linear_encoder`) as a causal pass forward and one over the reversed sequence,
    less the key each query's own token counts twice. In the reversed pass a real token carries the gates between
    it and the next real token, so a later key s weighs exp(G_s - G_t) as in the definition."""
    n = q.shape[2]
    index = torch.arange(n, device=q.device).expand_as(real)
    candidates = torch.where(real, index, n)
    following = torch.cat([candidates[:, 1:], torch.full_like(candidates[:, :1], n)], dim=1)
    following = following.flip(1).cummin(dim=1).values.flip(1)  # (B, N): the next real position, n if none
    total = log_gate.cumsum(dim=2)
    ahead = total.gather(2, following.clamp(max=n - 1)[:, None].expand_as(total)) - total
    ahead = torch.where((following < n)[:, None], ahead, torch.zeros_like(ahead))
    forward, _ = run(q, k, v, log_gate, scales, real)
    flipped = (x.flip(2) for x in (q, k, v, ahead, scales))
    backward, _ = run(*flipped, real.flip(1))
    return forward + backward.flip(2) - scales[..., :1] * (q * k).sum(dim=-1, keepdim=True) * v


@dataclasses.dataclass
class LogLinearConfig(Mamba2Config):
    num_levels: int = option(16, "lambda's levels: sequences up to 2^(num_levels - 1) tokens (fla: 15)", minimum=2)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.chunk_size & (self.chunk_size - 1) == 0,
            f"chunk_size={self.chunk_size} must be a power of two (the chunks are the Fenwick tree's leaves); "
            f"use e.g. {1 << (self.chunk_size.bit_length() - 1)}",
        )
        require(
            self.chunk_size.bit_length() < self.num_levels,
            f"chunk_size={self.chunk_size} needs num_levels > {self.chunk_size.bit_length() - 1}",
        )
        require(self.backend != "fla", "backend='fla': log-linear has no fla route here; use 'pytorch' or 'auto'")


@register_attention(
    "log-linear", config=LogLinearConfig, causal=True, normalised=False, recurrent_state=True, positive_features=False
)
class LogLinearAttention(Mamba2Attention):
    """Log-Linear Mamba-2: a Fenwick tree of Mamba-2 states, each level weighed by a data-dependent lambda."""

    padding_takes_positions = True  # a padded token is removed: the step keeps its count as it was

    def __init__(self, cfg: LogLinearConfig):
        super().__init__(cfg)
        self.renderings = Renderings(
            naive=naive_log_linear,
            chunk=functools.partial(chunk_log_linear, chunk=cfg.chunk_size),
            step=log_linear_step,
            encoder=two_sided,
            naive_encoder=naive_log_linear_encoder,
        )
        generator = seeded_generator(cfg.seed, LEVEL_STREAM)
        bound = 1 / math.sqrt(cfg.head_dim)
        shape = (cfg.num_heads, cfg.head_dim, cfg.num_levels)
        self.level_weight = nn.Parameter(torch.empty(shape).uniform_(-bound, bound, generator=generator))
        self.level_scale = nn.Parameter(torch.ones(cfg.num_heads, 1, cfg.num_levels))

    def gated_inputs(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, ...]:
        """Mamba-2's C, B, dt x and log decay (B, H, N), lambda (B, H, N, L) and the real tokens (B, N)."""
        limit = 1 << (self.cfg.num_levels - 1)
        if q.shape[2] > limit:
            raise ConfigError(
                f"log-linear with num_levels={self.cfg.num_levels} takes up to {limit} tokens, got {q.shape[2]}; "
                f"raise num_levels"
            )
        c, b, x, log_gate = super().gated_inputs(q, k, v, mask)
        scales = nn.functional.softplus(self.level_scale * (v @ self.level_weight))
        real = torch.ones(q.shape[0], q.shape[2], dtype=torch.bool, device=q.device) if mask is None else mask
        return c, b, x, log_gate[..., 0], scales, real

    def core_state(self, batch_size: int, heads: int, dtype: torch.dtype, device: torch.device) -> State:
        """No buckets yet (B, H, 0, D, D) and a count of 0 tokens per row."""
        d = self.cfg.head_dim
        levels = torch.zeros(batch_size, heads, 0, d, d, dtype=dtype, device=device)
        return {"levels": levels, "count": torch.zeros(batch_size, dtype=torch.long, device=device)}

    def core_step(
        self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State, real_t: Tensor | None = None
    ) -> tuple[Tensor, State]:
        """One token through the Fenwick tree; a padded one (real_t False) leaves the state as it was."""
        count = state["count"]
        if int(count.max()) >= 1 << (self.cfg.num_levels - 1):
            raise ConfigError(f"log-linear with num_levels={self.cfg.num_levels} has no level for another token")
        q, k, v = q_t[:, :, None], k_t[:, :, None], v_t[:, :, None]
        inputs = [x[:, :, 0] for x in self.gated_inputs(q, k, v, None)[:5]]
        out, levels, after = log_linear_step(*inputs, state["levels"], count, real_t)
        if real_t is not None:
            before = nn.functional.pad(state["levels"], (0, 0, 0, 0, 0, levels.shape[2] - state["levels"].shape[2]))
            levels = torch.where(real_t.view(-1, 1, 1, 1, 1), levels, before)
            after = torch.where(real_t, after, count)
        return self.readout(out[:, :, None], q, k, v)[:, :, 0], {"levels": levels, "count": after}

    def core_prefill(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor) -> State:
        """The buckets after the prompt at once: key s lies in level bit_length(P XOR p_s) - 1 of the count P."""
        _, b, x, log_gate, _, _ = self.gated_inputs(q, k, v, real)
        count = real.long().sum(dim=1)
        depth = int(bit_length(count.max(), COUNT_BITS))
        level = bit_length(count[:, None] ^ positions(real), COUNT_BITS) - 1  # (B, N)
        member = nn.functional.one_hot(level.clamp(min=0), max(depth, 1))[..., :depth] * real[..., None]
        total = log_gate.cumsum(dim=2)
        weight = (total[..., -1:] - total).exp()  # decayed to the prompt's end
        levels = torch.einsum("bhn,bnj,bhnd,bhne->bhjde", weight, member.to(b.dtype), b, x)
        return {"levels": levels, "count": count}
