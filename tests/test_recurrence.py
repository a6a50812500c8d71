"""The recurrent form of every causal attention (attnbench.recurrence) against its parallel and chunked forms."""

import math

import pytest
import torch

from attnbench.attention_properties import (
    PropertyFailed,
    check_property,
    recurrent_matches_parallel,
    rounding_sensitivity,
)
from attnbench.kernels.linear.parallel import linear_attention
from attnbench.kernels.short_conv import ShortConvConfig
from attnbench.recurrence import state_bytes, step_through
from attnbench.registry import attention_capabilities, attention_entry, build_attention, module_attention_names

CAUSAL_ATTENTIONS = [
    ("softmax", {}),
    ("elu-linear", {}),
    ("performer", {"num_features": 16}),
    ("rfa", {"num_features": 8}),
    ("random-features", {"feature_map": "favor", "num_features": 16}),
    ("random-features", {"feature_map": "softplus", "num_features": 16}),
    ("random-features", {"feature_map": "trig", "form": "scaled", "num_features": 8}),
    ("coulomb", {"feature_map": "favor", "num_features": 16}),
]
CAUSAL_ATTENTIONS += [
    (name, {})
    for name in module_attention_names()
    if not name.startswith("test-")
    and attention_entry(name).capabilities.causal
    and name not in dict(CAUSAL_ATTENTIONS)
]


@pytest.mark.parametrize("name, options", CAUSAL_ATTENTIONS, ids=lambda x: x if isinstance(x, str) else None)
def test_recurrent_form_equals_parallel_over_a_thousand_steps_with_padding(name, options):
    """Every causal attention (new registrations too), at one shape; `attnbench check` runs every shape."""
    recurrent_matches_parallel(name, options, batch=2, heads=1)


TRIG = ("random-features", {"feature_map": "trig", "form": "scaled", "num_features": 8})


def _float32_against_float64(name, options, n=400):
    """(float32 output, float64 output, rounding sensitivity), all float64, for one causal call."""
    attn = build_attention(name, head_dim=16, num_heads=1, causal=True, seed=0, **options).eval()
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 1, n, 16, generator=g) for _ in range(3))
    mask = torch.ones(1, n, dtype=torch.bool)
    with torch.no_grad():
        low = attn(q, k, v, key_padding_mask=mask).double()
        wide = [t.double() for t in (q, k, v)]
        sensitivity = rounding_sensitivity(attn, wide, mask, torch.float32)
        exact = attn(*wide, key_padding_mask=mask)
    return low, exact, sensitivity


def test_rounding_sensitivity_is_an_ulp_where_well_conditioned_and_large_where_the_normaliser_cancels():
    """Softmax's outputs are convex combinations: float32 rounding moves them by a few ulps of the values. Trig
    features' signed normaliser cancels: there the sensitivity is orders larger, and it bounds (times sqrt(N)) how
    far the float32 form itself lands from float64, which is what the recurrent check allows."""
    ulp = torch.finfo(torch.float32).eps
    _, exact, sensitivity = _float32_against_float64("softmax", {})
    assert float((sensitivity / (exact.abs() + 1)).max()) < 20 * ulp
    low, exact, sensitivity = _float32_against_float64(*TRIG)
    assert float((sensitivity / (exact.abs() + 1)).max()) > 100 * ulp
    assert bool(((low - exact).abs() <= 1e-4 * (1 + exact.abs()) + 400**0.5 * sensitivity).all())


def test_a_stepped_form_off_by_a_thousandth_fails_even_where_features_cancel(monkeypatch):
    """The conditioning allowance is per output: a float32 step that is wrong everywhere is caught, cancelling or
    not."""
    cls = type(build_attention(TRIG[0], head_dim=8, num_heads=1, causal=True, **TRIG[1]))
    original = cls.step

    def off(self, *args, **kwargs):
        out, state = original(self, *args, **kwargs)
        return (out * (1 + 1e-3) if out.dtype == torch.float32 else out), state

    monkeypatch.setattr(cls, "step", off)
    with pytest.raises(PropertyFailed, match="float32 recurrent outputs"):
        recurrent_matches_parallel(*TRIG, batch=1, heads=1)


@pytest.mark.parametrize("name", ["linformer", "nystromformer"])
def test_attentions_without_a_causal_form_say_so_and_skip_the_property(name):
    assert attention_capabilities(name, max_length=64).causal is False
    verdicts = check_property(name, "recurrent form equals the parallel form")
    assert all(v.ok is None and "causal=no" in v.detail for v in verdicts)


def _naive_causal(phi_q, phi_k, v, mask):
    """out_i = sum_{j <= i, real} (phi_q_i . phi_k_j) v_j / sum_{j <= i, real} phi_q_i . phi_k_j, by loops."""
    n = v.shape[2]
    out = torch.zeros_like(v)
    for i in range(n):
        w = (phi_q[:, :, i : i + 1] * phi_k[:, :, : i + 1]).sum(-1) * mask[:, None, : i + 1]  # (B, H, i + 1)
        out[:, :, i] = (w[..., None] * v[:, :, : i + 1]).sum(2) / w.sum(-1, keepdim=True).clamp_min(1e-6)
    return out


def test_linear_kernel_parallel_chunked_and_recurrent_forms_agree():
    """The quadratic form (one chunk), chunks of 64 and 7, and stepping all equal the naive loop (float64)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 150, 8, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(2, 150, dtype=torch.bool)
    mask[1, 120:] = False
    mask[0, :3] = False
    attn = build_attention("elu-linear", head_dim=8, num_heads=2, causal=True).double()
    phi_q, phi_k = attn.feature_map(q), attn.feature_map(k)
    expected = _naive_causal(phi_q, phi_k, v, mask)
    real = mask[:, None, :, None].expand_as(v)
    for chunk in (150, 64, 7):
        got = linear_attention(phi_q, phi_k, v, mask, causal=True, chunk=chunk)
        torch.testing.assert_close(got[real], expected[real], rtol=1e-12, atol=1e-12)
    stepped, _ = step_through(attn, q, k, v, mask)
    torch.testing.assert_close(stepped[real], expected[real], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, options", [("softmax", {}), ("performer", {"num_features": 16}), ("elu-linear", {})])
def test_step_leaves_its_state_alone_and_prefill_equals_stepping(name, options):
    attn = build_attention(name, head_dim=8, num_heads=2, causal=True, **options).eval()
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 30, 8, generator=g) for _ in range(3))
    mask = torch.ones(2, 30, dtype=torch.bool)
    mask[0, :4] = False
    with torch.no_grad():
        _, stepped = step_through(attn, q, k, v, mask)
        prefilled = attn.prefill_state(k, v, mask)
        assert stepped.keys() == prefilled.keys()
        for key in stepped:
            torch.testing.assert_close(prefilled[key], stepped[key].to(prefilled[key].dtype), rtol=1e-5, atol=1e-5)
        before = {key: t.clone() for key, t in stepped.items()}
        first, _ = attn.step(q[:, :, 0], k[:, :, 0], v[:, :, 0], stepped)
        again, _ = attn.step(q[:, :, 0], k[:, :, 0], v[:, :, 0], stepped)
    assert all(torch.equal(before[key], stepped[key]) for key in before)
    torch.testing.assert_close(first, again, rtol=0, atol=0)


STEPPED = [(name, options) for name, options in CAUSAL_ATTENTIONS if name != "random-features"]
STEPPED += [
    (name, {**options, "short_conv": 3})
    for name, options in STEPPED
    if issubclass(attention_entry(name).config, ShortConvConfig)
]


@pytest.mark.parametrize("name, options", STEPPED, ids=lambda x: x if isinstance(x, str) else str(x or ""))
def test_a_token_that_does_not_fit_the_state_is_refused(name, options):
    """A batch-2 state stepped with a batch-1 token, one head, four features or float64 raises a ValueError
    naming the mismatch (broadcasting returned batch-2 outputs, or cast the state), whether the state was stepped
    to or prefilled; a fitting token still steps."""
    attn = build_attention(name, head_dim=8, num_heads=2, causal=True, max_length=64, **options).eval()
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 2, 6, 8, generator=g) for _ in range(3))
    with torch.no_grad():
        stepped = step_through(attn, q, k, v)[1]
        states = [stepped] + ([attn.prefill_state(k, v, q=q)] if hasattr(attn, "prefill_state") else [])
        wrong = {
            "batch of 2": lambda x: x[:1],
            "num_heads=2": lambda x: x[:, :1],
            "head_dim=8": lambda x: x[..., :4],
            "float64": lambda x: x.double(),
        }
        for state in states:
            for said, change in wrong.items():
                token = [change(x[:, :, -1]) for x in (q, k, v)]
                with pytest.raises(ValueError, match=said):
                    attn.step(*token, state)
            out, _ = attn.step(q[:, :, -1], k[:, :, -1], v[:, :, -1], state)
            assert out.shape == (2, 2, 8)


def test_performer_causal_form_is_exactly_causal():
    """The first real key anchors favor's stabiliser: a loud later key moves no earlier output at all."""
    attn = build_attention("performer", head_dim=8, num_heads=1, num_features=16, causal=True).eval()
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 1, 40, 8, generator=g) for _ in range(3))
    loud = k.clone()
    loud[:, :, 30:] *= 20
    with torch.no_grad():
        torch.testing.assert_close(attn(q, loud, v)[:, :, :30], attn(q, k, v)[:, :, :30], rtol=0, atol=0)


def test_state_bytes_counts_the_tensors():
    state = {"a": torch.zeros(2, 3, dtype=torch.float64), "b": [torch.zeros(4, dtype=torch.bool)]}
    assert state_bytes(state) == 2 * 3 * 8 + 4
    assert math.isclose(state_bytes(torch.zeros(5)), 20)
