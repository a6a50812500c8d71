"""Chunked passes never pad a sequence up to a chunk longer than itself (attnbench.kernels.chunks)."""

import importlib

import pytest
import torch

from attnbench.kernels.chunks import chunk_length, split_chunks
from attnbench.registry import build_attention

CHUNKED = [  # (attention, its largest chunk_size, the modules whose chunked passes split positions)
    ("deltanet", 4096, ["attnbench.baselines.deltanet.chunk"]),
    ("gated-deltanet", 4096, ["attnbench.baselines.deltanet.chunk"]),
    ("gla", None, ["attnbench.baselines.gla.chunk"]),  # no option: its chunks of 64
    ("mamba2", 4096, ["attnbench.baselines.gla.chunk"]),
    ("log-linear", 4096, ["attnbench.baselines.log_linear.chunk"]),
    ("rwkv7", 128, ["attnbench.baselines.rwkv7.chunk"]),
]


def test_chunk_length_is_the_sequence_where_shorter():
    assert chunk_length(4096, 32) == 32 and chunk_length(16, 32) == 16 and chunk_length(64, 0) == 1
    assert split_chunks(torch.ones(1, 1, 5, 2), 2).shape == (1, 1, 3, 2, 2)


@pytest.mark.parametrize("name, largest, modules", CHUNKED, ids=[c[0] for c in CHUNKED])
@pytest.mark.parametrize("causal", [True, False])
def test_a_chunk_size_above_the_length_costs_no_padding_and_changes_nothing(
    name, largest, modules, causal, monkeypatch
):
    """DeltaNet with chunk_size 4096 at N = 32 padded every row to 4096 positions (x900-7500 the time, GBs) for the
    same outputs: each chunked pass now splits N = 32 into chunks of at most 32."""
    seen = []

    def recording(x, c):
        seen.append(c)
        return split_chunks(x, c)

    for module in modules:
        monkeypatch.setattr(importlib.import_module(module), "split_chunks", recording)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 32, 16, generator=g) for _ in range(3))
    outputs = []
    for options in ({"chunk_size": largest} if largest else {}, {"chunk_size": 32} if largest else {}):
        torch.manual_seed(0)
        attn = build_attention(name, head_dim=16, num_heads=2, seed=0, causal=causal, **options).eval()
        with torch.no_grad():
            outputs.append(attn(q, k, v))
    assert seen and max(seen) <= 32
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)
