"""The generalized delta rule (diagonal-plus-low-rank transition) in chunks, for training (the chunkwise DPLR form of
fla's generalized_delta_rule, the form of its chunked RWKV-7 kernel).

Inside a chunk starting from state S, let b_t be the cumulative log gate from the chunk's start (per key channel),
G_t = diag(exp(b_t)), and u_t = alpha_t^T S_{t-1} the low-rank read. Then S_t = G_t S + sum_{j <= t} G_t G_j^-1
(beta_j u_j^T + k_j v_j^T), so with alpha~_t = G_{t-1} alpha_t, beta~_j = G_j^-1 beta_j, k~_j = G_j^-1 k_j:
u_t = alpha~_t^T S + sum_{j < t} (alpha~_t . beta~_j) u_j + (alpha~_t . k~_j) v_j, i.e. (I - A_ab) U = A~ S + A_ak V
(one triangular solve per chunk, batched over all chunks: U = W S + U_0), outputs q~_t^T S + sum_{j <= t}
(q~_t . beta~_j) u_j + (q~_t . k~_j) v_j with q~_t = G_t q_t, and the next state G_C (S + B~^T U + K~^T V). The
factors exp(-b_j) grow with the chunk: the caller keeps C max|g| below float32's exponent range (RWKV-7's decay
is bounded, |g| < exp(-1/2); `rwkv7.MAX_CHUNK`). Only the (Dk, Dv) state runs across chunks.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnbench.kernels.chunks import chunk_length, split_chunks


def chunk_dplr(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    alpha: Tensor,
    beta: Tensor,
    log_gate: Tensor,
    chunk: int = 32,
    initial: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Causal: the same outputs (B, H, N, Dv) and last state (B, H, Dk, Dv) as `naive_dplr`."""
    b, h, n, dk = k.shape
    chunk = chunk_length(chunk, n)
    qc, kc, vc, ac, bc, gc = (split_chunks(x, chunk) for x in (q, k, v, alpha, beta, log_gate))
    total = gc.cumsum(dim=3)  # b_t, (B, H, nc, C, Dk); padding adds 0
    grown, shrunk, end = total.exp(), (-total).exp(), total[..., -1:, :].exp()  # exp(b_t), exp(-b_t), exp(b_C)
    q_in, a_in = qc * grown, ac * (total - gc).exp()
    k_start, beta_start = kc * shrunk, bc * shrunk
    a_ab = (a_in @ beta_start.transpose(-2, -1)).tril(-1)
    a_ak = (a_in @ k_start.transpose(-2, -1)).tril(-1)
    a_qb = (q_in @ beta_start.transpose(-2, -1)).tril()
    a_qk = (q_in @ k_start.transpose(-2, -1)).tril()
    system = torch.eye(chunk, dtype=k.dtype, device=k.device) - a_ab  # I - A_ab, unit lower triangular
    w = torch.linalg.solve_triangular(system, a_in, upper=False, unitriangular=True)
    u_0 = torch.linalg.solve_triangular(system, a_ak @ vc, upper=False, unitriangular=True)
    within = a_qk @ vc  # the chunk's own keys and values
    writes = (k_start * end).transpose(-2, -1) @ vc  # the chunk's keys at its end, (B, H, nc, Dk, Dv)
    beta_end, carries = beta_start * end, end.transpose(-2, -1)  # (B, H, nc, C, Dk), (B, H, nc, Dk, 1)
    state = k.new_zeros(b, h, dk, v.shape[-1]) if initial is None else initial
    outs = []
    # chunk by chunk through unbind: indexing x[:, :, c] in the loop would make each index's backward a
    # full-size zero tensor, quadratic in the chunk count
    for parts in zip(*(x.unbind(2) for x in (w, u_0, q_in, a_qb, within, beta_end, carries, writes))):
        w_c, u0_c, q_c, qb_c, within_c, beta_c, carry_c, write_c = parts
        u = w_c @ state + u0_c  # the low-rank reads u_t of the chunk, (C, Dv)
        outs.append(q_c @ state + qb_c @ u + within_c)
        state = state * carry_c + beta_c.transpose(-2, -1) @ u + write_c
    return torch.stack(outs, dim=2).reshape(b, h, -1, v.shape[-1])[:, :, :n], state
