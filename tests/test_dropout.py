"""Hashed dropout (attnbench.dropout): the documented hash, the same mask on every path, nn.Dropout's contract."""

import pytest
import torch

from attnbench import dropout
from attnbench.kernels import native
from attnbench.model import ModelConfig, TransformerClassifier


def _python_draw(i: int, seed: int) -> int:
    """The module docstring's formula in plain Python integers."""

    def lowbias32(x: int) -> int:
        x ^= x >> 16
        x = (x * 0x7FEB352D) % 2**32
        x ^= x >> 15
        x = (x * 0x846CA68B) % 2**32
        return x ^ (x >> 16)

    k0 = lowbias32(seed % 2**32)
    k1 = lowbias32((seed >> 32) ^ k0)
    return lowbias32(lowbias32((i % 2**32) ^ k0) ^ k1 ^ ((i >> 32) * 0x9E3779B9) % 2**32)


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**40 + 3, 2**63 - 2])
def test_draws_follow_the_documented_hash(seed):
    index = [0, 1, 2, 15, 16, 1000, 2**32 - 1, 2**32, 2**32 + 5, 2**40 + 77]
    got = dropout.draws(torch.tensor(index, dtype=torch.int64), seed).tolist()
    assert got == [_python_draw(i, seed) for i in index]


@pytest.mark.skipif(native.library() is None, reason=f"native kernels {native.status()}")
@pytest.mark.parametrize("numel", [1, 15, 16, 1000, 70001, 300000])
def test_the_fused_kernel_gives_the_torch_paths_result_bitwise_on_any_threads(numel, monkeypatch):
    x = torch.randn(numel, generator=torch.Generator().manual_seed(numel))
    fused = dropout.hash_dropout(x, 0.1, 99)
    for threads in (1, 2, 3):
        assert torch.equal(native.dropout(x, dropout.threshold(0.1), 1.0 / 0.9, 99, threads), fused)
    monkeypatch.setattr(native, "library", lambda: None)
    assert torch.equal(dropout.hash_dropout(x, 0.1, 99), fused)


def test_hash_dropout_keeps_nn_dropouts_contract():
    """Drops close to p of the elements (binomial bounds), scales the rest by 1 / (1 - p), is the identity in eval
    mode and at p = 0, and its gradient is the same mask and scale."""
    p, n = 0.1, 200_000
    x = torch.rand(n, generator=torch.Generator().manual_seed(0)) + 1.0  # no zeros of its own
    layer = dropout.HashDropout(p).train()
    x.requires_grad_()
    out = layer(x)
    dropped = out == 0
    assert abs(dropped.float().mean().item() - p) < 5 * (p * (1 - p) / n) ** 0.5
    kept = ~dropped
    torch.testing.assert_close(out[kept], x[kept] * (1 / (1 - p)), rtol=1e-6, atol=0)
    out.backward(torch.ones(n))
    assert torch.equal(x.grad == 0, dropped)
    torch.testing.assert_close(x.grad[kept], torch.full((int(kept.sum()),), 1 / (1 - p)), rtol=1e-6, atol=0)
    assert layer.eval()(x) is x and dropout.HashDropout(0.0).train()(x) is x
    with pytest.raises(ValueError, match="must lie in"):
        dropout.HashDropout(1.0)


def test_the_same_torch_seed_gives_the_same_masks_and_another_seed_others():
    layer, x = dropout.HashDropout(0.5).train(), torch.ones(4096)
    torch.manual_seed(7)
    first = [layer(x) for _ in range(2)]
    torch.manual_seed(7)
    again = [layer(x) for _ in range(2)]
    torch.manual_seed(8)
    other = layer(x)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[0], other)
    agree = (first[0] == other).float().mean().item()
    assert 0.4 < agree < 0.6  # independent masks at p = 0.5 agree on about half the elements


def test_the_model_takes_its_dropout_from_the_configured_source():
    hashed = TransformerClassifier(ModelConfig(vocab_size=50, max_length=16))
    plain = TransformerClassifier(ModelConfig(vocab_size=50, max_length=16, dropout_rng="torch"))

    def kinds(m):
        return {type(x) for x in m.modules() if isinstance(x, (torch.nn.Dropout, dropout.HashDropout))}

    assert kinds(hashed) == {dropout.HashDropout} and kinds(plain) == {torch.nn.Dropout}
