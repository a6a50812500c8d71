"""The delta rule in chunks through the WY representation (Yang et al., NeurIPS 2024, §3), for training; with the
gate of Gated DeltaNet (Yang, Kautz, Hatamizadeh 2024, §3.3) where one is given.

Within a chunk starting from state S, write G_t = a_1 ... a_t (the gates' product from the chunk's start; 1 without
a gate) and u_t = beta_t (v_t - a_t S_{t-1}^T k_t), so S_t = G_t S + sum_{j <= t} (G_t / G_j) k_j u_j^T. Then
u_t + beta_t sum_{j < t} (G_t / G_j) (k_t . k_j) u_j = beta_t (v_t - G_t S^T k_t): with
A = tril(diag(beta) (K K^T * Gamma), -1), Gamma_tj = G_t / G_j, (I + A) U = diag(beta) V - diag(beta G) K S, i.e.
U = T V - W S for T = (I + A)^{-1} diag(beta) and W = (I + A)^{-1} diag(beta G) K (one triangular solve per chunk,
batched over all chunks at once). Outputs O = diag(G) Q S + tril(Q K^T * Gamma) U (diagonal included) and the next
state G_C S + (diag(G_C / G) K)^T U. Only the (Dk, Dv) state runs across chunks. Gamma is exp of differences of
cumulative log gates (<= 0 below the diagonal), so no gate, however strong, overflows.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnbench.kernels.chunks import chunk_length, split_chunks
from attnbench.kernels.gated_recurrence import decay_matrix


def chunk_delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_gate: Tensor | None = None,
    chunk: int = 64,
    initial: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Causal: the same outputs (B, H, N, Dv) and last state (B, H, Dk, Dv) as `naive_delta_rule`."""
    b, h, n, dk = k.shape
    chunk = chunk_length(chunk, n)
    qc, kc, vc, bc = (
        split_chunks(q, chunk),
        split_chunks(k, chunk),
        split_chunks(v, chunk),
        split_chunks(beta, chunk)[..., None],
    )
    eye = torch.eye(chunk, dtype=k.dtype, device=k.device)
    products, start_keys, end_keys, decay = kc @ kc.transpose(-2, -1), kc, kc, None
    carries: list[Tensor | None] = [None] * qc.shape[2]
    if log_gate is not None:
        total = split_chunks(log_gate, chunk).cumsum(dim=3)  # (B, H, nc, C): log G_t, padding adds 0
        decay = decay_matrix(total)
        products, start_keys = products * decay, kc * total.exp()[..., None]
        end_keys = kc * (total[..., -1:] - total).exp()[..., None]
        carries = list(total[..., -1].exp()[..., None, None].unbind(2))
    system = eye + (bc * products).tril(-1)  # I + A, unit lower triangular
    w = torch.linalg.solve_triangular(system, bc * start_keys, upper=False, unitriangular=True)  # W
    u = torch.linalg.solve_triangular(system, bc * vc, upper=False, unitriangular=True)  # T V
    scores = qc @ kc.transpose(-2, -1)  # after the solves: this order keeps DeltaNet's gradients bit-for-bit
    if decay is not None:
        scores, qc = scores * decay, qc * total.exp()[..., None]
    scores = scores.tril()
    state = k.new_zeros(b, h, dk, v.shape[-1]) if initial is None else initial
    outs = []
    # chunk by chunk through unbind: indexing x[:, :, c] in the loop would make each index's backward a
    # full-size zero tensor, quadratic in the chunk count
    for u_c, w_c, q_c, s_c, k_c, carry in zip(*(x.unbind(2) for x in (u, w, qc, scores, end_keys)), carries):
        new_values = u_c - w_c @ state  # U = T V - W S
        outs.append(q_c @ state + s_c @ new_values)
        state = (state if carry is None else state * carry) + k_c.transpose(-2, -1) @ new_values
    return torch.stack(outs, dim=2).reshape(b, h, -1, v.shape[-1])[:, :, :n], state
