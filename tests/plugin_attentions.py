"""Plain-module attentions as a third party writes them, for `attnbench check` and plugin-option tests: one with a
required constructor argument, one that returns float64, one that treats a float mask as additive."""

import torch


class Banded(torch.nn.Module):
    """Softmax over keys within `window` positions; `window` has no default (a required option)."""

    def __init__(self, window: int, head_dim: int = 64):
        super().__init__()
        self.window = window

    def forward(self, q, k, v, key_padding_mask=None):
        n = q.shape[-2]
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        near = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs() <= self.window
        allowed = near if key_padding_mask is None else near & key_padding_mask.bool()[:, None, None, :]
        return scores.masked_fill(~allowed, -1e9).softmax(-1) @ v


class Float64Out(torch.nn.Module):
    """Plain softmax attention that hands back float64."""

    def forward(self, q, k, v, key_padding_mask=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).double()


class AdditiveMask(torch.nn.Module):
    """Passes the mask to SDPA as it comes: a float 0/1 mask then adds 0 or 1 instead of masking."""

    def forward(self, q, k, v, key_padding_mask=None):
        mask = None if key_padding_mask is None else key_padding_mask[:, None, None, :]
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
