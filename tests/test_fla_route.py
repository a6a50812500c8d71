"""The flash-linear-attention route of retention, GLA, DeltaNet, Gated DeltaNet, Mamba-2 and RWKV-7: the backend
choice and its errors, the adapter (layouts, scale, gates, padding, encoder forms, the caller's dtype) against a
stand-in for fla written from fla's documented recurrences, and, on a GPU with fla installed, fla's kernels against
our chunked forms."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from attnbench.errors import ConfigError
from attnbench.kernels import fla_route
from attnbench.registry import build_attention

ROUTED = [
    ("gla", {}),
    ("retention", {}),
    ("deltanet", {"chunk_size": 8}),
    ("gated-deltanet", {"chunk_size": 8}),
    ("gated-deltanet", {"chunk_size": 8, "allow_neg_eigval": True}),
    ("mamba2", {"chunk_size": 8}),
    ("rwkv7", {"chunk_size": 8}),
]


def _recurrence(q, k, v, log_gate=None, beta=None, alpha=None, low_rank=None, scale=1.0):
    """fla's naive recurrences (fla/ops/{gla,simple_gla,delta_rule,gated_delta_rule,generalized_delta_rule/dplr}/
    naive.py) in fla's (B, T, H, K) layout: the state S (B, H, K, V) decays by exp(g) (per channel or per head),
    takes the low-rank term b (a^T S) of the state before it (alpha, low_rank: fla's a, b), the delta-rule write
    (beta) or k v^T; o_t = (scale q_t)^T S. As fla's kernels: outputs in the inputs' dtype, the state in float32
    (float64 for float64 inputs, so that the comparisons below stay exact)."""
    dtype, work = q.dtype, torch.promote_types(q.dtype, torch.float32)
    q, k, v, log_gate, beta, alpha, low_rank = (
        x if x is None else x.to(work) for x in (q, k, v, log_gate, beta, alpha, low_rank)
    )
    b, t, h, dk = q.shape
    state = q.new_zeros(b, h, dk, v.shape[-1])
    outs = []
    for i in range(t):
        k_i, v_i = k[:, i], v[:, i]
        read = None if alpha is None else torch.einsum("bhk,bhkv->bhv", alpha[:, i], state)
        if log_gate is not None:
            gate = log_gate[:, i].exp()
            state = state * (gate[..., None] if gate.dim() == 3 else gate[..., None, None])
        if beta is not None:
            v_i = (v_i - torch.einsum("bhk,bhkv->bhv", k_i, state)) * beta[:, i, :, None]
        if read is not None:
            state = state + low_rank[:, i, :, :, None] * read[..., None, :]
        state = state + k_i[..., None] * v_i[..., None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", scale * q[:, i], state))
    return torch.stack(outs, dim=1).to(dtype), state


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
        "fla.ops.gated_delta_rule": (
            "chunk_gated_delta_rule",
            lambda q, k, v, g, beta, scale, output_final_state: _recurrence(q, k, v, g, beta=beta, scale=scale),
        ),
        "fla.ops.generalized_delta_rule": (
            "chunk_dplr_delta_rule",
            lambda q, k, v, a, b, gk, scale, output_final_state: _recurrence(
                q, k, v, gk, alpha=a, low_rank=b, scale=scale
            ),
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


@pytest.mark.parametrize("name, options", ROUTED)
@pytest.mark.parametrize("causal", [True, False])
def test_the_fla_route_answers_in_the_callers_dtype(stand_in_fla, name: str, options: dict, causal: bool) -> None:
    """bfloat16 in, bfloat16 out, although fla returns the final state in float32 (DeltaNet's encoder form once
    multiplied its bfloat16 queries by that float32 state and failed); close to the float32 route."""
    q, k, v, mask = _inputs(4, torch.float32)
    exact = build_attention(name, head_dim=8, num_heads=2, causal=causal, backend="fla", **options)
    low = build_attention(name, head_dim=8, num_heads=2, causal=causal, backend="fla", **options)
    low.load_state_dict(exact.state_dict())
    got = low.to(torch.bfloat16)(*(x.to(torch.bfloat16) for x in (q, k, v)), mask)
    assert got.dtype == torch.bfloat16 and low.kernel_routes == {"fla": 1}
    real = mask[:, None, :, None].expand_as(got)
    torch.testing.assert_close(got.float()[real], exact(q, k, v, mask)[real], atol=0.1, rtol=0.05)


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ConfigError, match="backend"):
        build_attention("gla", head_dim=8, num_heads=2, backend="triton")


GPU_FLA = torch.cuda.is_available() and fla_route.unavailable(torch.zeros(1, device="cuda")) is None


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


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with CUDA may take the fla route")
def test_backend_fla_on_a_run_without_cuda_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys) -> None:
    """It passed validation and failed in the cell (exit 1, after the data was loaded); now one line, exit 2, nothing
    written: a hybrid whose layer asks for fla as well."""
    import yaml

    from attnbench.cli import main

    monkeypatch.chdir(tmp_path)
    layers = [{"name": "gla", "options": {"backend": "fla"}}, "softmax"]
    for attention in (
        {"name": "gla", "options": {"backend": "fla"}},
        {"name": "hybrid", "options": {"layers": layers}},
    ):
        suite = {
            "name": "fla-here",
            "description": "backend fla on this machine",
            "attentions": [attention],
            "seeds": [0],
            "tasks": [{"name": "mqar", "options": {"num_train": 8, "num_validation": 8, "num_test": 8}}],
            "model": {"d_model": 16, "num_heads": 2, "num_layers": 2},
            "training": {"epochs": 1},
            "measurements": ["recall"],
        }
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(suite))
        assert main(["run", "s.yaml", "--out", "run", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "has backend 'fla', which cannot run here: its Triton kernels run on CUDA, and this runs on cpu" in err
        assert err.count("\n") == 1 and not (tmp_path / "run").exists(), err
