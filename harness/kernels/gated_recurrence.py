"""The gated recurrences: a state S (Dk, Dv) per head that decays by a data-dependent gate and takes one write per
token (retention, GLA, Mamba-2's SSD, Gated DeltaNet, RWKV-7), on the state-space pipeline of `recurrent_attention`
(short convolution, core, per-head output norm).

A subclass says two things: how the recurrence's inputs follow from the head's q, k, v (`gated_inputs`: queries,
keys, values, then the family's gates, each (B, H, N, ...), with padded positions made neutral, so that they
neither write nor decay), and which recurrence runs them (`renderings`: the token loop, the chunked training
form, the one-token step, the encoder rule and fla's kernel, sibling files of the family as fla's ops). The base
turns these into the causal and encoder forms, their naive twins, the decoding state and step, and the fla route.
Retention is GLA with one scalar gate per head; Mamba-2's core is the same recurrence with dt-scaled inputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import Tensor

from attnbench.errors import ConfigError
from attnbench.kernels.fla_route import route_name
from attnbench.kernels.recurrent_attention import PrefillsState, RecurrentAttention, State

# (q, k, v, *gates), each (B, H, N, ...) -> (outputs (B, H, N, Dv), last state (B, H, Dk, Dv))
Pass = Callable[..., tuple[Tensor, Tensor]]
# (q_t, k_t, v_t, *gates_t, state=state), each (B, H, ...) -> (out_t (B, H, Dv), the state after it)
Step = Callable[..., tuple[Tensor, Tensor]]
# (causal pass, q, k, v, *gates) -> outputs (B, H, N, Dv): the non-causal form built on a causal pass
Encoder = Callable[..., Tensor]


def decay_matrix(total: Tensor) -> Tensor:
    """exp(total_i - total_j) for j <= i, else 0: cumulative log gates (..., C) -> (..., C, C), the decay between
    positions of a chunk as differences (<= 0 on and below the diagonal), so no gate, however strong, overflows."""
    c = total.shape[-1]
    lower = torch.ones(c, c, dtype=torch.bool, device=total.device).tril()
    return (total[..., :, None] - total[..., None, :]).masked_fill(~lower, -torch.inf).exp()


def final_state(run: Pass, q: Tensor, k: Tensor, *rest: Tensor) -> Tensor:
    """The encoder form of a recurrence without a natural two-sided one (the delta rules): every query reads the
    state after the whole sequence, o_i = S_N^T q_i (the state a decoder would hold)."""
    return q @ run(q, k, *rest)[1]


@dataclasses.dataclass(frozen=True)
class Renderings:
    """One recurrence, rendered several ways over the same inputs (q, k, v, then its gates)."""

    naive: Pass  # the token loop: the reference the others are tested against
    chunk: Pass  # the chunked training form
    step: Step  # one token, for decoding
    encoder: Encoder = final_state  # the non-causal form, on the chunked pass (or fla's)
    naive_encoder: Callable[..., Tensor] | None = None  # the non-causal form from its definition; None: `encoder`
    fla: Pass | None = None  # flash-linear-attention's kernel for `chunk` (attnbench.kernels.fla_route), CUDA only


class GatedRecurrence(PrefillsState, RecurrentAttention):
    """Base of a gated recurrence: subclasses give `renderings` and `gated_inputs` (and may give `readout`). A
    prompt's state is the chunked pass's last state (`prefill_state`), not a token-by-token walk."""

    renderings: Renderings  # one per class, or per instance where an option shapes it (a chunk size)

    def gated_inputs(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, ...]:
        """(q, k, v, *gates) for the renderings from the head's q, k, v (B, H, N, D) and mask (B, N) (None: no
        padding); a padded position must leave the state as it was."""
        raise NotImplementedError

    def readout(self, out: Tensor, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """The attention's output from the recurrence's, out (B, H, N, Dv), given the q, k, v it read (Mamba-2:
        its D skip and output gate); as it is by default. The per-head output norm follows."""
        return out

    def causal_pass(self, x: Tensor) -> Pass:
        """The chunked form, or fla's kernel where the `backend` option takes that route (counted either way)."""
        if self.renderings.fla is not None:
            return self.renderings.fla if self.takes_fla(x) else self.renderings.chunk
        if self.cfg.backend == "fla":
            raise ConfigError(
                f"backend 'fla' cannot run {type(self).__name__}: flash-linear-attention has no kernel for it "
                f"here; use backend 'pytorch'"
            )
        self._took(route_name(False))
        return self.renderings.chunk

    def parallel(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        inputs = self.gated_inputs(q, k, v, mask)
        run = self.causal_pass(q)
        out = run(*inputs)[0] if self.causal else self.renderings.encoder(run, *inputs)
        return self.readout(out, q, k, v)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        inputs, r = self.gated_inputs(q, k, v, mask), self.renderings
        if self.causal:
            out = r.naive(*inputs)[0]
        else:
            out = r.naive_encoder(*inputs) if r.naive_encoder is not None else r.encoder(r.naive, *inputs)
        return self.readout(out, q, k, v)

    def core_state(self, batch_size: int, heads: int, dtype: torch.dtype, device: torch.device) -> State:
        d = self.cfg.head_dim
        return {"kv": torch.zeros(batch_size, heads, d, d, dtype=dtype, device=device)}

    def core_prefill(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor) -> State:
        """The state after q, k, v (B, H, N, D) with real (B, N): the chunked (or fla's) pass's last state."""
        return {"kv": self.causal_pass(q)(*self.gated_inputs(q, k, v, real))[1]}

    def core_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State) -> tuple[Tensor, State]:
        q, k, v = q_t[:, :, None], k_t[:, :, None], v_t[:, :, None]
        inputs = [x[:, :, 0] for x in self.gated_inputs(q, k, v, None)]
        out, kv = self.renderings.step(*inputs, state=state["kv"])
        return self.readout(out[:, :, None], q, k, v)[:, :, 0], {"kv": kv}
