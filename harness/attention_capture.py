"""Capturing what the attention modules of a model see, for a learning phase (phase A) that trains on it.

A learning phase (Coulomb's particle alignment, Hedgehog's distillation) needs each attention layer's inputs
(q, k, key_padding_mask) and output on a batch, not the model's prediction. `AttentionCapture` hooks the attention
modules, forwards a batch and stops the pass as soon as the last of them has been called.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn


class _AllCaptured(Exception):
    """Raised by the last capture hook of a pass: the rest of the forward pass is not needed."""


class AttentionCapture:
    """Forward hooks that keep (q, k, key_padding_mask) and the output of each attention module in one pass.

    Once every module's output is in, the pass is cut short (the layers after the last attention and the
    classifier do not affect a learning phase), which saves about half a forward for 2 layers. `remove` takes
    the hooks off again.
    """

    def __init__(self, modules: list[nn.Module]):
        self.inputs: list[tuple[Tensor, Tensor, Tensor | None] | None] = [None] * len(modules)
        self.outputs: list[Tensor | None] = [None] * len(modules)
        self.pending: set[int] = set()
        self.handles = [m.register_forward_hook(self._hook(i), with_kwargs=True) for i, m in enumerate(modules)]

    def _hook(self, index: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, kwargs: dict, output: Tensor) -> None:
            q, k = args[0], args[1] if len(args) > 1 else kwargs["k"]
            mask = kwargs.get("key_padding_mask", args[3] if len(args) > 3 else None)
            self.inputs[index], self.outputs[index] = (q, k, mask), output
            self.pending.discard(index)
            if not self.pending:
                raise _AllCaptured

        return hook

    def run(self, model: nn.Module, batch: tuple, device: torch.device) -> Tensor:
        """Forward `batch` (ids, mask, segments, labels) until every module's output is captured -> the labels of
        the sequences the attention saw (B, or 2B for a two-tower row: both documents, each with the row's label;
        a decoder's batch: its per-position labels (B, N))."""
        ids, mask, seg, labels = (None if t is None else t.to(device) for t in batch)
        self.pending = set(range(len(self.inputs)))
        try:
            model(ids, mask) if seg is None else model(ids, mask, seg)  # a decoder takes no segments
        except _AllCaptured:
            pass
        if self.pending:
            raise RuntimeError(
                f"attention capture: attention modules {sorted(self.pending)} were not called by the model's "
                f"forward; capture the modules the model runs (e.g. model.attention_modules())"
            )
        copies = getattr(model, "sequences_per_row", 1)
        return labels.repeat(copies, *[1] * (labels.dim() - 1))

    def remove(self) -> None:
        """Take the hooks off the modules."""
        for handle in self.handles:
            handle.remove()
