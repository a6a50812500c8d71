"""The delta rule in chunks through the WY representation (Yang et al., NeurIPS 2024, §3), for training.

Within a chunk starting from state S, write u_t = beta_t (v_t - S_{t-1}^T k_t), so S_t = S + sum_{j <= t} k_j u_j^T.
Then u_t + beta_t sum_{j < t} (k_t . k_j) u_j = beta_t (v_t - S^T k_t): with A = tril(diag(beta) K K^T, -1),
(I + A) U = diag(beta) V - diag(beta) K S, i.e. U = T V - W S for T = (I + A)^{-1} diag(beta) and W = T K
(one triangular solve per chunk, batched over all chunks at once). Outputs O = Q S + tril(Q K^T) U (diagonal
included) and the next state S + K^T U. Only the (Dk, Dv) state runs across chunks.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def _chunks(x: Tensor, c: int) -> Tensor:
    """(B, H, N, ...) -> (B, H, N / C, C, ...), zero-padded at the end to a multiple of C."""
    pad = (-x.shape[2]) % c
    if pad:
        x = nn.functional.pad(x, (0, 0) * (x.dim() - 3) + (0, pad))
    return x.view(*x.shape[:2], x.shape[2] // c, c, *x.shape[3:])


def chunk_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, chunk: int = 64, initial: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Causal: the same outputs (B, H, N, Dv) and last state (B, H, Dk, Dv) as `naive_delta_rule`."""
    b, h, n, dk = k.shape
    qc, kc, vc, bc = _chunks(q, chunk), _chunks(k, chunk), _chunks(v, chunk), _chunks(beta, chunk)[..., None]
    eye = torch.eye(chunk, dtype=k.dtype, device=k.device)
    system = eye + (bc * (kc @ kc.transpose(-2, -1))).tril(-1)  # I + A, unit lower triangular
    w = torch.linalg.solve_triangular(system, bc * kc, upper=False, unitriangular=True)  # T K
    u = torch.linalg.solve_triangular(system, bc * vc, upper=False, unitriangular=True)  # T V
    scores = (qc @ kc.transpose(-2, -1)).tril()
    state = k.new_zeros(b, h, dk, v.shape[-1]) if initial is None else initial
    outs = []
    # chunk by chunk through unbind: indexing x[:, :, c] in the loop would make each index's backward a
    # full-size zero tensor, quadratic in the chunk count
    for u_c, w_c, q_c, s_c, k_c in zip(*(x.unbind(2) for x in (u, w, qc, scores, kc)), strict=True):
        new_values = u_c - w_c @ state  # U = T V - W S
        outs.append(q_c @ state + s_c @ new_values)
        state = state + k_c.transpose(-2, -1) @ new_values
    return torch.stack(outs, dim=2).reshape(b, h, -1, v.shape[-1])[:, :, :n], state
