"""LRA's two-tower matcher: each document encoded alone by one shared encoder, then an MLP on [u, v, u*v, u-v].

A row of a pair task (`attnbench.tasks.byte_retrieval`) holds document A (segment id 0) then document B
(segment id 1); `split_documents` moves each to a row of its own, right-padded to the fixed
`document_length` with positions from 0, so no token of one document attends to the other. Both
documents of a batch go through the encoder in one call (2B rows): one draw of an attention's random
features serves both towers (the same encoder), and an attention that redraws them in place between
calls cannot invalidate the first tower's graph. With the width fixed, A's row never depends on B.
The encoder is the shared `TransformerClassifier` without its classifier (timm's headless model).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from attnbench.model import ModelConfig, TransformerClassifier
from attnbench.tasks.base import TaskData
from attnbench.tasks.byte_retrieval import TWO_TOWER


def split_documents(
    input_ids: Tensor, mask: Tensor, segment_ids: Tensor, pad_id: int, width: int
) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """(B, N) rows of two documents -> ((ids_a, mask_a), (ids_b, mask_b)), each (B, width) right-padded."""
    out = []
    for segment in (0, 1):
        chosen = mask & (segment_ids == segment)
        lengths = chosen.sum(dim=1)
        if int(lengths.max()) > width:
            raise ValueError(f"a document has {int(lengths.max())} tokens, more than the width {width}")
        doc_mask = torch.arange(width, device=input_ids.device) < lengths[:, None]
        ids = input_ids.new_full((input_ids.shape[0], width), pad_id)
        ids[doc_mask] = input_ids[chosen]  # row-major order on both sides keeps each document's token order
        out.append((ids, doc_mask))
    return out[0], out[1]


class TwoTowerClassifier(nn.Module):
    """Shared encoder on each document alone; logits from an MLP on [u, v, u * v, u - v] (LRA's matching head)."""

    sequences_per_row = 2  # the encoder sees 2B sequences, all A then all B (phase A gives each its row's label)

    def __init__(
        self,
        cfg: ModelConfig,
        document_length: int,
        attention: str = "softmax",
        attention_options: dict[str, Any] | None = None,
        seed: int = 0,
    ):
        super().__init__()
        self.cfg, self.document_length = cfg, document_length
        single = dataclasses.replace(cfg, max_length=document_length, num_segments=1, num_classes=1)
        self.encoder = TransformerClassifier(single, attention, attention_options, seed=seed)
        self.encoder.classifier = nn.Identity()  # pooled (B, d_model) vectors out
        self.capabilities = self.encoder.capabilities
        self.head = nn.Sequential(
            nn.Linear(4 * cfg.d_model, cfg.ffn_dim), nn.GELU(), nn.Linear(cfg.ffn_dim, cfg.num_classes)
        )

    def attention_modules(self) -> list[nn.Module]:
        """The encoder's attention modules (shared by both towers)."""
        return self.encoder.attention_modules()

    def towers(
        self, input_ids: Tensor, attention_mask: Tensor | None, segment_ids: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """Rows of two documents (B, N) with segment ids 0/1 -> pooled vectors u, v (B, d_model) of each alone."""
        if segment_ids is None:
            raise ValueError("the two-tower model needs segment_ids (0 = first document, 1 = second)")
        mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask
        (ids_a, mask_a), (ids_b, mask_b) = split_documents(
            input_ids, mask, segment_ids, self.cfg.pad_id, self.document_length
        )
        pooled = self.encoder(torch.cat([ids_a, ids_b]), torch.cat([mask_a, mask_b]))
        return pooled[: len(ids_a)], pooled[len(ids_a) :]

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, segment_ids: Tensor | None = None
    ) -> Tensor:
        """Rows of two documents (B, N) with segment ids 0/1 -> logits (B, C)."""
        u, v = self.towers(input_ids, attention_mask, segment_ids)
        return self.head(torch.cat([u, v, u * v, u - v], dim=-1))


def build_classifier(
    cfg: ModelConfig, task: TaskData, attention: str, attention_options: dict[str, Any] | None, seed: int
) -> nn.Module:
    """The model a task asks for: the two-tower matcher for pair-matching tasks, else the shared classifier."""
    if task.info.get("architecture") == TWO_TOWER:
        return TwoTowerClassifier(cfg, task.info["document_length"], attention, attention_options, seed=seed)
    return TransformerClassifier(cfg, attention, attention_options, seed=seed)
