"""A deliberately broken attention for the property tests: it averages every value, padding included, and mixes
the heads, so padding invariance and head sharing must fail."""

import torch


class LeakyAttention(torch.nn.Module):
    """Every query reads the mean of all values of all heads, padding included."""

    def __init__(self, head_dim: int = 64):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, q, k, v, key_padding_mask=None):
        return (self.scale * v.mean(dim=(1, 2), keepdim=True) + 0 * q).expand_as(v)
