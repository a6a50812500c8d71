"""The gated linear recurrence in chunks (GLA's chunkwise form, Yang et al. 2024, §3.3), for training.

Inside a chunk of C positions the recurrence is a masked product with the gates folded into q and k
(q_i exp(b_i), k_j exp(-b_j), b the cumulative log gate from the chunk's start); across chunks a state
(B, H, Dk, Dv) carries the sum, decayed by each chunk's total gate. O(N C Dk + N Dk Dv) time; C bounds the
exponents: |b| <= C max|g|, which the callers keep below float32's range (retention's gates are near 1, GLA's
are floored).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from attnbench.kernels.chunks import chunk_length, split_chunks
from attnbench.kernels.gated_recurrence import decay_matrix


def chunk_gated_recurrence(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, chunk: int = 64, initial: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Causal: the same outputs (B, H, N, Dv) and last state (B, H, Dk, Dv) as `naive_gated_recurrence`."""
    b, h, n, dk = q.shape
    chunk = chunk_length(chunk, n)
    qc, kc, vc = split_chunks(q, chunk), split_chunks(k, chunk), split_chunks(v, chunk)
    g = split_chunks(log_gate.expand(b, h, n, dk), chunk).cumsum(dim=3)  # b: (B, H, nc, C, Dk), padding adds 0
    last = g[:, :, :, -1:]  # each chunk's total log gate
    q_in, k_in = qc * g.exp(), kc * (-g).exp()
    scores = (q_in @ k_in.transpose(-2, -1)).tril()  # (B, H, nc, C, C), keys j <= i inside the chunk
    within = scores @ vc
    writes = (kc * (last - g).exp()).transpose(-2, -1) @ vc  # (B, H, nc, Dk, Dv): the chunk's keys at its end
    decays = last.squeeze(3).exp()[..., None]  # (B, H, nc, Dk, 1)
    state = q.new_zeros(b, h, dk, v.shape[-1]) if initial is None else initial
    earlier = []
    # chunk by chunk through unbind: indexing x[:, :, c] in the loop would make each index's backward a
    # full-size zero tensor, quadratic in the chunk count
    for q_c, decay_c, write_c in zip(q_in.unbind(2), decays.unbind(2), writes.unbind(2), strict=True):
        earlier.append(q_c @ state)
        state = state * decay_c + write_c
    out = within + torch.stack(earlier, dim=2)
    return out.reshape(b, h, -1, v.shape[-1])[:, :, :n], state


def chunk_headwise_recurrence(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, chunk: int = 64, initial: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Causal, one gate per head and position (log_gate (B, H, N, 1), or expanded over Dk with equal columns: the
    first is read): the same outputs and last state as `naive_gated_recurrence`. Inside a chunk the decays between
    positions form one (C, C) matrix per head (`decay_matrix`, fla's simple GLA), so gates of any strength stay
    finite, where the per-channel form above needs them floored."""
    b, h, n, dk = q.shape
    chunk = chunk_length(chunk, n)
    qc, kc, vc = split_chunks(q, chunk), split_chunks(k, chunk), split_chunks(v, chunk)
    total = split_chunks(log_gate[..., :1], chunk)[..., 0].cumsum(dim=3)  # (B, H, nc, C), padding adds 0
    within = ((qc @ kc.transpose(-2, -1)) * decay_matrix(total)) @ vc
    q_in = qc * total.exp()[..., None]
    writes = (kc * (total[..., -1:] - total).exp()[..., None]).transpose(-2, -1) @ vc  # the chunk's keys at its end
    carries = total[..., -1].exp()[..., None, None]  # (B, H, nc, 1, 1)
    state = q.new_zeros(b, h, dk, v.shape[-1]) if initial is None else initial
    earlier = []
    for q_c, carry, write_c in zip(q_in.unbind(2), carries.unbind(2), writes.unbind(2), strict=True):
        earlier.append(q_c @ state)
        state = state * carry + write_c
    out = within + torch.stack(earlier, dim=2)
    return out.reshape(b, h, -1, v.shape[-1])[:, :, :n], state


CausalPass = Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]  # (q, k, v, log_gate) -> (out, state)


def symmetric_decay(causal_pass: CausalPass, q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor) -> Tensor:
    """The encoder form (`naive_symmetric_decay`) as a forward and a backward pass of the causal recurrence
    (`causal_pass`: `chunk_gated_recurrence` or fla's kernel), less the diagonal they both count. The backward
    pass reads position l's gate when it moves from l to l - 1, so key j > i is weighted by the gates of positions
    i + 1 .. j, as the forward pass weights j < i."""
    b, h, n, dk = q.shape
    log_gate = log_gate.expand(b, h, n, dk)
    forward, _ = causal_pass(q, k, v, log_gate)
    flipped = log_gate.flip(2)
    shifted = torch.cat([torch.zeros_like(flipped[:, :, :1]), flipped[:, :, :-1]], dim=2)
    backward, _ = causal_pass(q.flip(2), k.flip(2), v.flip(2), shifted)
    return forward + backward.flip(2) - (q * k).sum(dim=-1, keepdim=True) * v
