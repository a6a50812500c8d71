"""Key padding masks: one rule for every attention, whichever form the mask comes in.

A mask may come as the model makes it (bool, True = real token) or as a Hugging Face `attention_mask`
comes (int64 or float 1/0, 1 = real token); every attention turns it into the bool form here before
any path (compiled or PyTorch) reads it, so that the three forms mean the same everywhere. Anything
else (other values, another shape) is a ValueError that says what was given and what to give.
"""

from __future__ import annotations

import torch
from torch import Tensor


def key_padding_mask(mask: Tensor | None, keys: Tensor) -> Tensor | None:
    """The (B, N) bool mask, True = real key, of a bool, integer or float 0/1 `mask` for `keys` (B, H, N, D)."""
    if mask is None:
        return None
    expected = (keys.shape[0], keys.shape[-2])
    if not isinstance(mask, Tensor):
        raise TypeError(
            f"key_padding_mask is a {type(mask).__name__}; give a tensor of shape (batch, keys) = "
            f"{expected}, True or 1 for a real token, False or 0 for padding"
        )
    if tuple(mask.shape) != expected:
        raise ValueError(
            f"key_padding_mask has shape {tuple(mask.shape)}; expected (batch, keys) = {expected}, "
            f"True or 1 for a real token, False or 0 for padding"
        )
    if mask.dtype == torch.bool:
        return mask
    if mask.is_complex():
        raise ValueError(f"key_padding_mask has dtype {mask.dtype}; give bool, or integers or floats 0/1")
    other = (mask != 0) & (mask != 1)
    if bool(other.any()):
        raise ValueError(
            f"key_padding_mask holds {mask[other].flatten()[0].item()!r}; a padding mask holds only "
            f"True/False or 1/0 (1 = real token, 0 = padding), e.g. a Hugging Face attention_mask"
        )
    return mask != 0
