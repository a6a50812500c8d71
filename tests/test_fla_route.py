"""The flash-linear-attention route of retention, GLA and DeltaNet: the backend choice and its errors, the
adapter (layouts, scale, gates, padding, encoder forms) against a stand-in for fla written from fla's documented
recurrences, and, on a GPU with fla installed, fla's kernels against our chunked forms."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest
import torch

from attnbench.errors import ConfigError
from attnbench.kernels import fla_route
from attnbench.registry import build_attention

ROUTED = [("gla", {}), ("retention", {}), ("deltanet", {"chunk_size": 8})]


def _recurrence(q, k, v, log_gate=None, beta=None, scale=1.0):
    """fla's naive recurrences (fla/ops/{gla,simple_gla,delta_rule}/naive.py) in fla's (B, T, H, K) layout: the
    state S (B, H, K, V) decays by exp(g) (per channel or per head) or takes the delta-rule write, then
    o_t = (scale q_t)^T S."""
    b, t, h, dk = q.shape
    state = q.new_zeros(b, h, dk, v.shape[-1])
    outs = []
    for i in range(t):
        k_i, v_i = k[:, i], v[:, i]
        if beta is not None:
            v_i = (v_i - torch.einsum("bhk,bhkv->bhv", k_i, state)) * beta[:, i, :, None]
        else:
            gate = log_gate[:, i].exp()
            state = state * (gate[..., None] if gate.dim() == 3 else gate[..., None, None])
        state = state + k_i[..., None] * v_i[..., None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", scale * q[:, i], state))
    return torch.stack(outs, dim=1), state


@pytest.fixture
def stand_in_fla(monkeypatch):
    """Install a package named fla whose three ops follow fla's documented contract, and let it take CPU inputs."""
    ops = {
        "fla.ops.gla": (
            "chunk_gla",
            lambda q, k, v, g, scale, output_final_state: _recurrence(q, k, v, g, scale=scale),
        ),
        "fla.ops.simple_gla": (
            "chunk_simple_gla",
            lambda q, k, v, g, scale, output_final_state: _recurrence(q, k, v, g, scale=scale),
        ),
        "fla.ops.delta_rule": (
            "chunk_delta_rule",
            lambda q, k, v, beta, scale, output_final_state: _recurrence(q, k, v, beta=beta, scale=scale),
        ),
    }
    for name in ("fla", "fla.ops"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    for name, (function, body) in ops.items():
        module = types.ModuleType(name)
        setattr(module, function, body)
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(fla_route, "unavailable", lambda x: None)


def _inputs(seed: int, dtype=torch.float64, device="cpu", n: int = 13, dim: int = 8):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 2, n, dim, generator=g, dtype=dtype).to(device) for _ in range(3))
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, -4:] = False  # the second row padded at the end
    return q, k, v, mask.to(device)


@pytest.mark.parametrize("name, options", ROUTED)
@pytest.mark.parametrize("causal", [True, False])
def test_the_fla_route_computes_our_recurrence(stand_in_fla, name: str, options: dict, causal: bool) -> None:
    q, k, v, mask = _inputs(0)
    ours = build_attention(name, head_dim=8, num_heads=2, causal=causal, **options).double()
    theirs = build_attention(name, head_dim=8, num_heads=2, causal=causal, backend="fla", **options).double()
    theirs.load_state_dict(ours.state_dict())
    expected, got = ours(q, k, v, mask), theirs(q, k, v, mask)
    assert torch.allclose(got, expected, atol=1e-10, rtol=0)
    assert theirs.kernel_routes == {"fla": 1} and ours.kernel_routes == {"pytorch-chunked": 1}


@pytest.mark.parametrize("name, options", ROUTED)
def test_backend_fla_without_cuda_says_why(name: str, options: dict) -> None:
    q, k, v, mask = _inputs(1, torch.float32)
    attn = build_attention(name, head_dim=8, num_heads=2, causal=True, backend="fla", **options)
    with pytest.raises(ConfigError, match="backend 'fla' cannot run: its Triton kernels run on CUDA.*cpu"):
        attn(q, k, v, mask)


@pytest.mark.parametrize("name, options", ROUTED)
def test_auto_takes_pytorch_where_fla_cannot_run(name: str, options: dict) -> None:
    q, k, v, mask = _inputs(2, torch.float32)
    auto = build_attention(name, head_dim=8, num_heads=2, causal=True, backend="auto", **options)
    plain = build_attention(name, head_dim=8, num_heads=2, causal=True, **options)
    plain.load_state_dict(auto.state_dict())
    assert torch.equal(auto(q, k, v, mask), plain(q, k, v, mask))
    assert auto.kernel_routes == {"pytorch-chunked": 1}


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ConfigError, match="backend"):
        build_attention("gla", head_dim=8, num_heads=2, backend="triton")


GPU_FLA = torch.cuda.is_available() and importlib.util.find_spec("fla") is not None


@pytest.mark.skipif(not GPU_FLA, reason="needs CUDA and flash-linear-attention (pip install flash-linear-attention)")
@pytest.mark.parametrize("name, options", ROUTED)
@pytest.mark.parametrize("causal", [True, False])
def test_fla_kernels_match_our_chunked_forms_on_gpu(name: str, options: dict, causal: bool) -> None:
    q, k, v, mask = _inputs(3, torch.float32, "cuda", n=200, dim=32)  # Triton's dot products want dims >= 16
    ours = build_attention(name, head_dim=32, num_heads=2, causal=causal, **options).cuda()
    theirs = build_attention(name, head_dim=32, num_heads=2, causal=causal, backend="fla", **options).cuda()
    theirs.load_state_dict(ours.state_dict())
    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = ours(*inputs, mask)
    expected.square().sum().backward()
    grads = [t.grad for t in inputs]
    inputs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    got = theirs(*inputs, mask)
    got.square().sum().backward()
    assert theirs.kernel_routes == {"fla": 1}
    torch.testing.assert_close(got, expected, atol=2e-3, rtol=2e-3)  # fla's kernels may use TF32 inside
    for mine, fla in zip(grads, (t.grad for t in inputs), strict=True):
        torch.testing.assert_close(fla, mine, atol=2e-2, rtol=2e-2)
