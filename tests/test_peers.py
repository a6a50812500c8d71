"""Adapters to the public implementations agree with ours at equal settings (skipped without the extra 'peers')."""

import importlib
import subprocess
import sys

import pytest
import torch
from cells import NO_TASK, tiny_cell

pytest.importorskip("performer_pytorch", reason="optional extra 'peers' not installed (pip install 'attnbench[peers]')")
pytest.importorskip("nystrom_attention", reason="optional extra 'peers' not installed (pip install 'attnbench[peers]')")

from attnbench.errors import UserError  # noqa: E402
from attnbench.measurements.fidelity import FidelityOptions, exact_attention, measure_fidelity  # noqa: E402
from attnbench.registry import build_attention  # noqa: E402


def _inputs(b, h, n, d, std=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in range(3))
    return std * q, std * k, v


def _pair(ours, theirs, **options):
    return (
        build_attention(ours, **options).double().eval(),
        build_attention(f"attnbench.baselines.peers:{theirs}", **options).double().eval(),
    )


def _relative(a, b):
    return float((a - b).norm() / b.norm())


def test_performer_pytorch_uses_our_projection_and_agrees_where_eps_is_negligible():
    ours, theirs = _pair("performer", "PerformerPytorch", head_dim=16, num_heads=1, num_features=64, seed=3)
    assert torch.equal(theirs.fast.projection_matrix, ours.feature_map.omega[0])
    q, k, v = _inputs(2, 1, 200, 16, std=0.1)  # features far above both eps (theirs 1e-4, ours 1e-6)
    with torch.no_grad():
        assert _relative(ours(q, k, v), theirs(q, k, v)) < 5e-5


def test_performer_pytorch_collapses_to_uniform_attention_at_unit_logit_variance():
    """Theirs adds eps = 1e-4 to every feature and stabilises keys by max w.x alone: at unit-variance logits the key
    features fall far below eps, the output nears the mean of V and the error nears uniform attention's; ours keeps
    the kernel (unbiased, noisier). The peers suite's fidelity setting."""
    options = FidelityOptions(inputs=["random"], seq_lens=[1024], batch=1, heads=4, head_dim=64, random_std=1.0)
    rows = {
        name: measure_fidelity(
            tiny_cell("fidelity", name, task=NO_TASK, model={}, training={}),
            options,
        )["details"]["rows"][0]
        for name in ("performer", "attnbench.baselines.peers:PerformerPytorch")
    }
    theirs, ours = rows["attnbench.baselines.peers:PerformerPytorch"], rows["performer"]
    assert theirs["from_uniform"] < 0.1 < 1.0 < ours["from_uniform"]
    assert abs(theirs["rel_error"] - theirs["uniform_rel_error"]) < 0.01


def test_performer_pytorch_is_given_unscaled_inputs_once():
    """Scaling q, k twice (a known trap) would halve the logits: the estimate would track softmax(qk/16)."""
    ours, theirs = _pair("performer", "PerformerPytorch", head_dim=16, num_heads=1, num_features=256, seed=1)
    q, k, v = _inputs(1, 1, 64, 16, std=0.5, seed=4)
    with torch.no_grad():
        out = theirs(q, k, v)
    right, twice = exact_attention(q, k, v), exact_attention(q / 2, k / 2, v)
    assert _relative(out, right) < _relative(out, twice)


def test_nystrom_attention_equals_ours_for_one_matrix_and_nearly_for_a_batch():
    ours, theirs = _pair("nystromformer", "NystromPeer", head_dim=8, num_heads=1, num_landmarks=8, seed=2)
    assert torch.equal(theirs.inner.res_conv.weight, ours.conv.weight)
    q, k, v = _inputs(1, 1, 64, 8, seed=1)
    with torch.no_grad():
        torch.testing.assert_close(theirs(q, k, v), ours(q, k, v))
    ours, theirs = _pair("nystromformer", "NystromPeer", head_dim=8, num_heads=4, num_landmarks=8, seed=2)
    q, k, v = _inputs(2, 4, 64, 8, seed=1)  # their pinv scales by the whole batch's maximum, ours per matrix
    with torch.no_grad():
        assert _relative(theirs(q, k, v), ours(q, k, v)) < 1e-2


def test_peer_costs_equal_ours_at_equal_settings():
    ours, theirs = _pair("performer", "PerformerPytorch", head_dim=64, num_heads=4, num_features=256)
    assert theirs.cost(1, 4, 4096, 64)["flops"] == ours.cost(1, 4, 4096, 64)["flops"]
    extra_bytes = ours.cost(1, 4, 4096, 64)["bytes"] - theirs.cost(1, 4, 4096, 64)["bytes"]
    assert extra_bytes == 3 * 256 * 64 * 4  # ours reads a projection per head, theirs one shared
    ours, theirs = _pair("nystromformer", "NystromPeer", head_dim=64, num_heads=4, num_landmarks=64)
    assert theirs.cost(1, 4, 4096, 64) == ours.cost(1, 4, 4096, 64)


def test_import_baselines_does_not_need_the_extra():
    code = "import baselines, sys; assert 'attnbench.baselines.peers' not in sys.modules and 'performer_pytorch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_extra_is_a_user_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "performer_pytorch", None)  # import fails as if not installed
    monkeypatch.delitem(sys.modules, "attnbench.baselines.peers", raising=False)
    with pytest.raises(UserError, match=r"pip install 'attnbench\[peers\]'"):
        importlib.import_module("attnbench.baselines.peers")
