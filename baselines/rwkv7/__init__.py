"""RWKV-7 "Goose" (Peng et al. 2025, arXiv 2503.14456): the generalized delta rule with a vector-valued decay, an
in-context learning rate and token shift.

S_t = S_{t-1} (diag(w_t) - kk_t (a_t * kk_t)^T) + v_t k_t^T in the paper's (Dv, Dk) orientation, o_t = S_t r_t; here
(Dk, Dv): S_t = diag(w_t) S_{t-1} + beta_t (alpha_t^T S_{t-1}) + k_t v_t^T with alpha = -kk, beta = kk * a, the
diagonal-plus-low-rank recurrence of this folder's renderings (`naive`, `chunk`, `recurrent`; fla's
generalized_delta_rule/dplr). The state is Dk x Dv = D x D per head. Per head and position, from the head's q, k, v
(the model's projections of the token; RWKV-7 mixes the token with its predecessor before projecting, here each
stream is mixed with its own predecessor, lerp(x_t, x_{t-1}, mu) per channel, the same for a linear projection up
to where the mix sits):
- token shift: r from q, k and the decay's and rate's inputs from k, v from v, each with its own mix mu;
- decay w_t = exp(g_t), g_t = -exp(-1/2) sigmoid(w_0 + tanh(x_w W_1) W_2) in (-0.607, 0) per key channel (RWKV-7's
  -softplus(-x) - 1/2 log-log form, fla's bounded gate);
- in-context learning rate a_t = sigmoid(a_0 + x_a A_1 A_2) per channel; kk_t = normalize(k_t * k_k) the removal
  key; the written key k_t (1 + (a_t - 1) k_a);
- the receptance r_t reads the state with no 1/sqrt(D) (RWKV-7's scale 1); the per-head norm (`output_norm`) follows
  as RWKV-7's GroupNorm.
Initialisation: the schedules of fla's layer over a head's channels (as for its first layer): mixes 1 - (n/D)^p,
decay bias from -5.5 (slow) to 0.5 (fast) with a zigzag, k_k = 0.71 - 0.1 * linear, k_a = 1.02; the low-rank
projections small and random. Left out, beside fla's layer: the value residual to the first layer (v_first), the
bonus term (r . (k * r_k)) v and the output gate g, which act after the recurrence. Padded positions write nothing
and keep the state; token shift reads the last real token (zeros at the start). Encoder (causal=False) form: every
query reads the memory after the whole sequence, as DeltaNet's.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch
from torch import Tensor, nn

from attnbench.baselines.rwkv7.chunk import chunk_dplr
from attnbench.baselines.rwkv7.naive import naive_dplr
from attnbench.baselines.rwkv7.recurrent import dplr_step
from attnbench.kernels import fla_route
from attnbench.kernels.gated_recurrence import GatedRecurrence, Renderings
from attnbench.kernels.recurrent_attention import RecurrentConfig, State, real_rows
from attnbench.options import option
from attnbench.registry import register_attention

DECAY_BOUND = math.exp(-0.5)  # |g_t| < e^(-1/2): RWKV-7's decay w_t = exp(-e^(-1/2) sigmoid(.)) > 0.545
MAX_CHUNK = 128  # exp(MAX_CHUNK * DECAY_BOUND) = 4e33 stays inside float32 (`chunk_dplr`)
SHIFTED = ("r", "w", "k", "v", "a")  # the streams mixed with their predecessor: r from q; w, k, a from k; v from v


@dataclasses.dataclass
class RWKV7Config(RecurrentConfig):
    chunk_size: int = option(32, "positions per chunk of the training form", minimum=1, maximum=MAX_CHUNK)
    low_rank: int = option(16, "rank of the decay's and the learning rate's low-rank projections", minimum=1)


def _schedules(d: int) -> dict[str, Tensor]:
    """fla's RWKV-7 initial schedules over one head's d channels (its first layer's): (d,) each."""
    n = torch.arange(d, dtype=torch.float32)
    ddd = n / d
    linear = n / max(d - 1, 1) - 0.5
    zigzag = (n - (d - 1) / 2) / max((d - 1) / 2, 1)
    zigzag = zigzag * zigzag.abs()
    power = {"r": 0.2, "w": 0.9, "k": 0.7, "v": 0.7, "a": 0.9}
    return {
        **{f"mix_{s}": 1 - ddd ** power[s] for s in SHIFTED},
        "decay_bias": -6 + 6 * n / max(d - 1, 1) + 0.5 + 2.5 * zigzag,
        "rate_bias": -0.19 + 0.3 * zigzag + 0.4 * linear,
        "removal_scale": 0.71 - 0.1 * linear,
    }


def _shifted(x: Tensor) -> Tensor:
    """x (B, H, N, D) one position later: x_{t-1} at t, zeros at the start."""
    return nn.functional.pad(x, (0, 0, 1, 0))[:, :, :-1]


@register_attention(
    "rwkv7", config=RWKV7Config, causal=True, normalised=False, recurrent_state=True, positive_features=False
)
class RWKV7Attention(GatedRecurrence):
    """RWKV-7's time mixing: vector decay, in-context learning rate and token shift over a D x D state per head."""

    def __init__(self, cfg: RWKV7Config):
        super().__init__(cfg)
        self.renderings = Renderings(
            naive=naive_dplr,
            chunk=functools.partial(chunk_dplr, chunk=cfg.chunk_size),
            step=dplr_step,
            fla=fla_route.dplr,
        )
        heads, d, rank = cfg.num_heads, cfg.head_dim, cfg.low_rank
        generator = torch.Generator().manual_seed(cfg.seed)
        schedules = _schedules(d)

        def per_head(x: Tensor) -> nn.Parameter:
            return nn.Parameter(x.view(1, 1, d).repeat(heads, 1, 1))

        def small(*shape: int) -> nn.Parameter:
            bound = 1 / math.sqrt(shape[-2])
            return nn.Parameter(torch.empty(heads, *shape).uniform_(-bound, bound, generator=generator))

        self.mix = nn.Parameter(
            torch.stack([schedules[f"mix_{s}"] for s in SHIFTED]).view(5, 1, 1, d).repeat(1, heads, 1, 1)
        )
        self.decay_bias, self.decay_down, self.decay_up = (
            per_head(schedules["decay_bias"]),
            small(d, rank),
            small(rank, d),
        )
        self.rate_bias, self.rate_down, self.rate_up = per_head(schedules["rate_bias"]), small(d, rank), small(rank, d)
        self.removal_scale = per_head(schedules["removal_scale"])
        self.rate_scale = nn.Parameter(torch.full((heads, 1, d), 1.02))

    def gated_inputs(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, ...]:
        """(r, k, v, alpha = -kk, beta = kk a, g) for `naive_dplr`; padded positions write nothing, and token shift
        reads the last real token (padding zeroed before the shift)."""
        q, k, v = (real_rows(x, mask) for x in (q, k, v))
        before = {"q": _shifted(q), "k": _shifted(k), "v": _shifted(v)}
        now = {"q": q, "k": k, "v": v}
        mixed = {
            name: torch.lerp(now[source], before[source], mix)
            for name, source, mix in zip(SHIFTED, "qkkvk", self.mix.unbind(0), strict=True)
        }
        log_gate = -DECAY_BOUND * torch.sigmoid(
            self.decay_bias + torch.tanh(mixed["w"] @ self.decay_down) @ self.decay_up
        )
        rate = torch.sigmoid(self.rate_bias + mixed["a"] @ self.rate_down @ self.rate_up)
        removal = nn.functional.normalize(mixed["k"] * self.removal_scale, dim=-1)
        key = mixed["k"] * (1 + (rate - 1) * self.rate_scale)
        real = functools.partial(real_rows, mask=mask)
        return mixed["r"], real(key), mixed["v"], -removal, real(removal * rate), real(log_gate)

    def core_state(self, batch_size: int, heads: int, dtype: torch.dtype, device: torch.device) -> State:
        """The memory (B, H, D, D) and the last real token's q, k, v for token shift, (B, H, 3, D)."""
        d = self.cfg.head_dim
        previous = torch.zeros(batch_size, heads, 3, d, dtype=dtype, device=device)
        return super().core_state(batch_size, heads, dtype, device) | {"previous": previous}

    def core_prefill(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor) -> State:
        """The memory after the prompt and its last real token's q, k, v (zeros where a row has none)."""
        last = (real * torch.arange(1, real.shape[1] + 1, device=real.device)).argmax(dim=1)  # (B,)
        rows = torch.arange(real.shape[0], device=real.device)
        previous = torch.stack([x[rows, :, last] for x in (q, k, v)], dim=2) * real.any(dim=1).view(-1, 1, 1, 1)
        return super().core_prefill(q, k, v, real) | {"previous": previous.to(q.dtype)}

    def core_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State) -> tuple[Tensor, State]:
        """The inputs of a two-token sequence (the previous token, this one) at its second position, then a step."""
        pairs = [torch.stack([p, x], dim=2) for p, x in zip(state["previous"].unbind(2), (q_t, k_t, v_t))]
        inputs = [x[:, :, 1] for x in self.gated_inputs(*pairs, None)]
        out, kv = self.renderings.step(*inputs, state=state["kv"])
        return out, {"kv": kv, "previous": torch.stack([q_t, k_t, v_t], dim=2)}
