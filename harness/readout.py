"""MAD's auto-encoder readout (athms/mad-lab `mad/model/auto_encoder.py`), for its compression task: the causal
decoder's backbone reads the row, and every output position is decoded from the LAST position's hidden state alone
(plus a fixed sinusoidal code of the output position) by a two-layer MLP and the head, so the whole row has to pass
through one d_model-wide vector. Selected by a task whose info says `readout: last` (attnbench.tasks.mad).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnbench.decoder import TransformerDecoder


def sinusoidal_positions(length: int, dim: int) -> Tensor:
    """The fixed sine-cosine code of positions 0 .. length-1 (Vaswani et al.) -> (length, dim)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10_000.0) / dim))
    code = torch.zeros(length, dim)
    code[:, 0::2] = torch.sin(position * frequency)
    code[:, 1::2] = torch.cos(position * frequency)[:, : dim // 2]
    return code


class LastPositionReadout(nn.Module):
    """A decoder whose outputs all come from its last position: (B, N) ids -> (B, N, V) logits, row n decoded from
    the hidden state at the last real position plus position n's code (MAD's AutoEncoder with pooling 'last')."""

    def __init__(self, decoder: TransformerDecoder):
        super().__init__()
        self.decoder, self.cfg = decoder, decoder.cfg
        d = decoder.cfg.d_model
        self.register_buffer("positions", sinusoidal_positions(decoder.cfg.max_length, d), persistent=False)
        self.mlp = nn.Sequential(
            nn.LayerNorm(d), nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d), nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d)
        )

    def attention_modules(self) -> list[nn.Module]:
        return self.decoder.attention_modules()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """input_ids (B, N) long; attention_mask (B, N) bool -> logits (B, N, V) from the last real position."""
        x, tokens = self.decoder.backbone(input_ids, attention_mask)
        if tokens is not None:
            x = tokens.unpack(x)
        b, n = input_ids.shape
        last = (attention_mask.sum(dim=1) - 1) if attention_mask is not None else torch.full((b,), n - 1)
        pooled = x[torch.arange(b), last.to(x.device)]  # (B, d_model)
        return self.decoder.head(self.mlp(pooled[:, None, :] + self.positions[:n]))
