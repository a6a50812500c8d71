"""Log-linear attention in chunks, for training: O(N log N) (Guo et al. 2025, §3.2, the chunkwise form).

With chunks of C = 2^c positions, a key in the query's own chunk has a level below c + 1 that depends on the two
offsets inside the chunk only (bit_length(i XOR j)): a (C, C) block of lambda-weighted, decayed scores. A key in an
earlier chunk has level c + 1 + J, J the level of the two chunks' indices: the chunks themselves form a Fenwick
tree. So a loop over chunks keeps one (Dk, Dv) state per chunk level present (the set bits of the chunk index),
each decayed to the chunk's start, reads them all with the query's lambda of their level, then adds the chunk's
own keys as a new bucket, merging the buckets below it as a binary counter carries. Padded tokens are moved to the
end of their row first (`compacted`), so that positions count real tokens only, as in `naive_log_linear`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnbench.baselines.log_linear.naive import bit_length
from attnbench.kernels.chunks import chunk_length, split_chunks
from attnbench.kernels.gated_recurrence import decay_matrix


def chunk_log_linear_packed(q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, scales: Tensor, chunk: int) -> Tensor:
    """Causal, every row's real tokens first (padding, if any, at the end with key 0 and gate 0): outputs
    (B, H, N, Dv). q, k (B, H, N, Dk), v (B, H, N, Dv), log_gate (B, H, N), scales (B, H, N, L); chunk a power of 2."""
    b, h, n, _ = q.shape
    chunk = chunk_length(chunk, 1 << (n - 1).bit_length())  # never past the power of two that holds the row
    inner = chunk.bit_length() - 1  # c: levels 0 .. c inside a chunk
    qc, kc, vc, lam = (split_chunks(x, chunk) for x in (q, k, v, scales))
    total = split_chunks(log_gate[..., None], chunk)[..., 0].cumsum(dim=3)  # (B, H, nc, C)
    offsets = torch.arange(chunk, device=q.device)
    level = bit_length(offsets[:, None] ^ offsets[None, :], inner + 1).expand(*lam.shape[:3], chunk, chunk)
    weights = (qc @ kc.transpose(-2, -1)) * decay_matrix(total) * lam.gather(4, level)
    within = weights @ vc
    q_in = qc * total.exp()[..., None]
    writes = (kc * (total[..., -1:] - total).exp()[..., None]).transpose(-2, -1) @ vc  # (B, H, nc, Dk, Dv)
    carries = total[..., -1].exp()[..., None, None]  # (B, H, nc, 1, 1)
    buckets: list[Tensor | None] = []  # chunk level J: the bucket of 2^J earlier chunks, decayed to this chunk
    outs = []
    for index, (q_c, lam_c, within_c, write_c, carry_c) in enumerate(
        zip(q_in.unbind(2), lam.unbind(2), within.unbind(2), writes.unbind(2), carries.unbind(2))
    ):
        present = [j for j, s in enumerate(buckets) if s is not None]
        out_c = within_c
        if present:
            states = torch.stack([buckets[j] for j in present], dim=2)  # (B, H, P, Dk, Dv)
            read = torch.einsum("bhcd,bhpde->bhcpe", q_c, states)
            out_c = out_c + (read * lam_c[..., [inner + 1 + j for j in present], None]).sum(dim=3)
        outs.append(out_c)
        buckets = [None if s is None else s * carry_c for s in buckets]  # decayed to the chunk's end
        carried = (index ^ (index + 1)).bit_length() - 1  # trailing ones of the chunk index: buckets that merge
        merged = sum((buckets[j] for j in range(carried)), write_c)
        buckets = [None] * carried + [merged] + buckets[carried + 1 :]
    return torch.stack(outs, dim=2).reshape(b, h, -1, v.shape[-1])[:, :, :n]


def compacted(run, q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, scales: Tensor, real: Tensor) -> Tensor:
    """`run` (a packed causal pass) on each row's real tokens moved to its front in order, its outputs put back
    where they came from: padded positions then take no position (fla's layers unpad the same way)."""
    if bool(real.all()):
        return run(q, k, v, log_gate, scales)
    order = torch.sort((~real).to(torch.int8), dim=1, stable=True).indices  # real tokens first, in order
    kept = real.gather(1, order)

    def gather(x: Tensor) -> Tensor:
        index = order.view(order.shape[0], 1, -1, *([1] * (x.dim() - 3))).expand(*x.shape)
        return x.gather(2, index)

    packed = [gather(x) for x in (q, k, v, log_gate, scales)]
    packed[1] = packed[1] * kept[:, None, :, None]
    packed[3] = packed[3] * kept[:, None, :]
    out = run(*packed)
    index = order.view(order.shape[0], 1, -1, 1).expand(*out.shape)
    return torch.zeros_like(out).scatter(2, index, out)
