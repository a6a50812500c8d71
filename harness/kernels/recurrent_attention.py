"""What the state-space attentions (retention, GLA, DeltaNet, BASED) share around their recurrence.

One pipeline for every rendering: the optional short convolution on q, k, v (`attnbench.kernels.short_conv`),
the family's core (the parallel/chunked form in `forward`, the token loop in `naive_forward`, the
recurrent `step`), then the optional per-head RMS norm of the output that RetNet, GLA and DeltaNet apply
after the recurrence (their GroupNorm / RMSNorm; the recurrence itself has no normaliser).

The recurrent contract: an attention built with causal=True offers `init_state(batch_size)` and
`step(q_t, k_t, v_t, state) -> (out_t, state)`, q_t, k_t, v_t, out_t (B, H, D); H is the attention's
`num_heads`. A state is a dict of tensors, each with the batch on its first axis; `check_step` refuses a token
that does not fit the attention or its state (every built-in step calls it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from attnbench.errors import ConfigError
from attnbench.kernels import masks
from attnbench.kernels.fla_route import Backend, route_name, use_fla
from attnbench.kernels.routes import RecordsRoutes
from attnbench.kernels.short_conv import ShortConvConfig, short_conv_for
from attnbench.options import option
from attnbench.registry import check_heads

State = dict[str, Tensor]


@dataclasses.dataclass
class RecurrentConfig(ShortConvConfig):
    """Options shared by the state-space attentions."""

    output_norm: bool = option(
        True,
        "per-head RMS norm of the output with a learned gain, as the papers' layers "
        "(RetNet GroupNorm, GLA and DeltaNet RMSNorm); false = the raw recurrence",
    )
    backend: Backend = option(
        "pytorch",
        "training form: pytorch (our chunked form, any device), fla (flash-linear-attention's Triton kernels, "
        "CUDA), auto (fla where the inputs are on CUDA and it imports, else pytorch); the route taken is recorded",
    )


class HeadRMSNorm(nn.Module):
    """x / rms(x) * gain over the last axis, a gain per head: (B, H, ..., D); (B, H, D) in a step."""

    def __init__(self, num_heads: int, head_dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.gain = nn.Parameter(torch.ones(num_heads, head_dim))

    def forward(self, x: Tensor, per_position: bool = True) -> Tensor:
        gain = self.gain[:, None] if per_position else self.gain
        return x * torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + self.eps) * gain


class RecurrentAttention(RecordsRoutes, nn.Module):
    """Base of a state-space attention: subclasses give `parallel`, `naive`, `core_state` and `core_step`."""

    # A padded token leaves the state as it was (the decays and gates skip it); where it takes a position, as in
    # BASED's window, `core_step` takes `real_t` (B,) instead and keeps the slot empty.
    padding_takes_positions = False

    def __init__(self, cfg: ShortConvConfig, generator: torch.Generator | None = None):
        """`generator`: where a subclass draws its own initial parameters, the short convolution draws first."""
        super().__init__()
        self.cfg, self.causal = cfg, cfg.causal
        self.short_conv = short_conv_for(cfg, generator)
        norm = getattr(cfg, "output_norm", False)  # a RecurrentConfig option; normalised attentions go without
        self.output_norm = HeadRMSNorm(cfg.num_heads, cfg.head_dim) if norm else None
        self.register_buffer("anchor", torch.zeros(()), persistent=False)  # dtype and device of new states

    def parallel(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """The training form (chunked or parallel): (B, H, N, D) each, mask (B, N) -> (B, H, N, D)."""
        raise NotImplementedError

    def naive(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """The reference form, a loop over tokens (the test oracle); same shapes as `parallel`."""
        raise NotImplementedError

    def core_state(self, batch_size: int, heads: int, dtype: torch.dtype, device: torch.device) -> State:
        raise NotImplementedError

    def core_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State) -> tuple[Tensor, State]:
        raise NotImplementedError

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        return self._run(self.parallel, q, k, v, key_padding_mask)

    def takes_fla(self, x: Tensor) -> bool:
        """Whether this training-form call takes the fla route (the `backend` option); the route is counted."""
        fla = use_fla(self.cfg.backend, x)
        self._took(route_name(fla))
        return fla

    def naive_forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """`forward` with the naive core in place of the parallel one."""
        return self._run(self.naive, q, k, v, key_padding_mask)

    def _run(self, core, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        check_heads(type(self).__name__, self.cfg.num_heads, q.shape[1])
        mask = masks.key_padding_mask(mask, k)
        if self.short_conv is not None:
            q, k, v = self.short_conv(q, k, v, mask)
        out = core(q, k, v, mask)
        return out if self.output_norm is None else self.output_norm(out)

    def init_state(self, batch_size: int) -> State:
        """The state before the first token, for `step` (causal attentions only)."""
        if not self.causal:
            raise ConfigError(
                f"{type(self).__name__} was built with causal=False, so it has no recurrent step; "
                f"build it with causal=True to decode token by token"
            )
        heads, dtype, device = self.cfg.num_heads, self.anchor.dtype, self.anchor.device
        state = {f"core.{name}": t for name, t in self.core_state(batch_size, heads, dtype, device).items()}
        if self.short_conv is not None:
            state["conv"] = self.short_conv.init_state(batch_size, heads, self.cfg.head_dim, dtype, device)
        return state

    def step(
        self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State, key_padding_mask: Tensor | None = None
    ) -> tuple[Tensor, State]:
        """One token: q_t, k_t, v_t (B, H, D) -> out_t (B, H, D) and the state after it; `key_padding_mask` (B,)
        False = a padded token, which reads the core state but leaves it as it was, and enters the short
        convolution's window as 0, as in the parallel form (the given state is never changed)."""
        check_step(self, q_t, k_t, v_t, state)
        real = None if key_padding_mask is None else key_padding_mask.to(torch.bool)
        new: State = {}
        if self.short_conv is not None:
            (q_t, k_t, v_t), new["conv"] = self.short_conv.step(q_t, k_t, v_t, state["conv"], real)
        core = {name[5:]: t for name, t in state.items() if name.startswith("core.")}
        if real is not None and self.padding_takes_positions:
            out, after = self.core_step(q_t, k_t, v_t, core, real)
        else:
            out, after = self.core_step(q_t, k_t, v_t, core)
            if real is not None:
                after = {
                    name: torch.where(real.view(-1, *([1] * (t.dim() - 1))), t, core[name]) for name, t in after.items()
                }
        new.update({f"core.{name}": t for name, t in after.items()})
        return (out if self.output_norm is None else self.output_norm(out, per_position=False)), new


def check_step(attention: nn.Module, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: Mapping[str, Tensor]) -> None:
    """Refuse a step whose token does not fit: q_t, k_t, v_t (B, H, D) alike, H and D as the attention was built
    (its `cfg`; H may be any where one head's parameters serve every head), and every tensor of the state with
    the token's batch B on its first axis and, where floating, the token's dtype. A ValueError saying what differs,
    where broadcasting would otherwise return another batch's outputs or cast the state silently."""
    name = type(attention).__name__
    if q_t.dim() != 3 or k_t.shape != q_t.shape or v_t.shape[:2] != q_t.shape[:2] or v_t.dim() != 3:
        shapes = ", ".join(str(tuple(x.shape)) for x in (q_t, k_t, v_t))
        raise ValueError(f"{name}.step takes one position of q, k, v, each (B, H, D) with one B and H; got {shapes}")
    batch, heads, dim = q_t.shape
    cfg = getattr(attention, "cfg", None)
    if hasattr(cfg, "num_heads"):
        check_heads(name, cfg.num_heads, heads)
    if hasattr(cfg, "head_dim") and dim != cfg.head_dim:
        raise ValueError(f"{name} was built with head_dim={cfg.head_dim} and stepped with tokens of {dim} features")
    dtypes = {x.dtype for x in (q_t, k_t, v_t)}
    if len(dtypes) > 1:
        raise ValueError(f"{name}.step: q, k, v in different dtypes ({', '.join(sorted(map(str, dtypes)))})")
    for key, t in state.items():
        if t.dim() == 0 or t.shape[0] != batch:
            raise ValueError(
                f"{name}.step: the state's {key!r} {tuple(t.shape)} holds a batch of "
                f"{t.shape[0] if t.dim() else 'none'} and the token a batch of {batch}; step a state made for "
                f"that batch (init_state({batch}) or prefill_state)"
            )
        if t.is_floating_point() and t.dtype != q_t.dtype:
            raise ValueError(
                f"{name}.step: the state's {key!r} is {t.dtype} and the token {q_t.dtype}; convert the attention "
                f"(.to(dtype)) before init_state, or the token, so that both are one dtype"
            )


class PrefillsState:
    """For a `RecurrentAttention` whose core state after a prompt follows from the whole prompt at once
    (`core_prefill`, e.g. a KV cache): `prefill_state`, which the decoder's prefill takes in place of stepping
    through the prompt token by token."""

    def core_prefill(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor) -> State:
        """The core state `core_step` holds after q, k, v (B, H, N, D), already filtered; real (B, N) bool."""
        raise NotImplementedError

    def prefill_state(
        self, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, q: Tensor | None = None
    ) -> State:
        """The state `step` would hold after keys k (B, H, N, D) and values v, in one pass; q too where the core
        reads it or a short convolution keeps a window of all three (the keys stand in for them otherwise)."""
        mask = masks.key_padding_mask(key_padding_mask, k)
        real = torch.ones(k.shape[0], k.shape[2], dtype=torch.bool, device=k.device) if mask is None else mask
        state: State = {}
        if self.short_conv is not None:
            if q is None:
                raise ValueError(f"{type(self).__name__} with short_conv needs the queries q to prefill its window")
            state["conv"] = self.short_conv.window(q, k, v, real)
            q, k, v = self.short_conv(q, k, v, real)
        core = self.core_prefill(k if q is None else q, k, v, real)
        return state | {f"core.{name}": t for name, t in core.items()}


def real_rows(x: Tensor, mask: Tensor | None) -> Tensor:
    """x (B, H, N, ...) with padded positions (mask (B, N) False) zeroed."""
    if mask is None:
        return x
    return x * mask.view(mask.shape[0], 1, mask.shape[1], *([1] * (x.dim() - 3))).to(x.dtype)
